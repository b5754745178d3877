"""`kubectl towline ui`: a web view of runs, served on loopback, acting only as the kubeconfig's user.

No in-cluster part and no credential of its own: every read and every decision
is an API call made with the person's kubeconfig identity, so RBAC and the
admission policies decide what the page shows and what a button may do.
"""
