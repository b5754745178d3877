"""A real local Kubernetes control plane for tests and `make dev`.

etcd + kube-apiserver + kube-controller-manager, and a real node next to them
(`towline_dev.node`: kubelet, containerd, CNI, kube-proxy, kube-scheduler,
CoreDNS, kube-router). Development tooling only: the operator never imports it.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout this tooling runs from: charts, CRDs, examples and image sources are read from it."""
