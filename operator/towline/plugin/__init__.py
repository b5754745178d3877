"""`kubectl towline`: the command line for people who start, watch and decide runs.

Parsing and rendering (`cli`, `render`, `graph`, `manifests`) are pure; every
API call goes through `towline.k8s.session`, as the user of the kubeconfig
context in use.
"""
