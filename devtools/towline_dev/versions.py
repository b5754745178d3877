"""The one place the local control plane's component versions are pinned.

Everything that builds, finds or checks the Kubernetes binaries reads these
constants; change a version here and nowhere else.
"""

from __future__ import annotations

KUBERNETES_VERSION = "v1.35.4"
"""k8s.io/kubernetes release: kube-apiserver, kube-controller-manager, kubectl."""

ETCD_VERSION = "v3.6.5"
"""go.etcd.io/etcd/server/v3: the etcd that Kubernetes 1.35 is released with."""

HELM_VERSION = "v3.20.2"
"""helm.sh/helm/v3: the release built against client-go 0.35."""
