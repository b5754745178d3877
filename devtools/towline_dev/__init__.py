"""A real local Kubernetes control plane for tests and `make dev`.

etcd + kube-apiserver + kube-controller-manager on loopback, plus a local step
executor that plays the node. Development tooling only: the operator never
imports it.
"""
