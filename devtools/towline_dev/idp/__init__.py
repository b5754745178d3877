"""The tests' OpenID Connect provider: ORY Hydra as a plain process on a test host address, a login and consent
app for the test people, and the authorization-code flow a test signs a person in with.

Test tooling only: nothing here ships, and nothing here is trusted by anything but the test control plane.
"""
