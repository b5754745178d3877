"""The webhook ingress: signed HTTP deliveries in, exactly one WorkflowRun per delivery out.

Its own process and Deployment (`towline ingress`), its own ServiceAccount. It
reads Workflows from a watch-fed cache, reads only the Secrets that webhook
triggers name (where the namespace opted in), and creates webhook runs. It
never logs a body, a signature or a secret value.
"""
