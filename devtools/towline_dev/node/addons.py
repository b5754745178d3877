"""What the node installs through the API: kube-router's role, and CoreDNS as a pod.

CoreDNS runs like any workload (a Deployment in kube-system labelled
``k8s-app: kube-dns`` behind the ``kube-dns`` Service on the cluster DNS IP), so a
step's NetworkPolicy reaches it the way it would on a real cluster.
"""

from __future__ import annotations

from typing import Any

from towline_dev.node.credentials import KUBE_ROUTER
from towline_dev.node.layout import CLUSTER_DNS_IP, COREDNS_IMAGE, corefile

JSON = dict[str, Any]


def _cluster_role(name: str, rules: list[JSON]) -> JSON:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules}


def _binding(name: str, subject: JSON) -> JSON:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [subject],
    }


_READ = ["get", "list", "watch"]


def kube_router_rbac() -> list[JSON]:
    """Read-only: what the NetworkPolicy controller watches, and nothing else."""
    name = "towline-dev:kube-router"
    return [
        _cluster_role(name, [
            {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
             "verbs": _READ},
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": _READ},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _READ},
        ]),
        _binding(name, {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBE_ROUTER.common_name}),
    ]


def coredns_manifests() -> list[JSON]:
    labels = {"k8s-app": "kube-dns"}
    meta = {"namespace": "kube-system"}
    return [
        _cluster_role("towline-dev:coredns", [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
             "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ]),
        _binding("towline-dev:coredns", {"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", **meta},
         "data": {"Corefile": corefile()}},
        {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "coredns", "labels": labels, **meta},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "securityContext": {
                            "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                            # Port 53 without any capability.
                            "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}],
                        },
                        "containers": [{
                            "name": "coredns",
                            "image": COREDNS_IMAGE,
                            "imagePullPolicy": "Never",
                            "args": ["-conf", "/etc/coredns/Corefile"],
                            "ports": [{"containerPort": 53, "protocol": "UDP", "name": "dns"},
                                      {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"}],
                            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                            "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}},
                            "securityContext": {
                                "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                        }],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns", "labels": labels, **meta},
            "spec": {
                "clusterIP": CLUSTER_DNS_IP,
                "selector": labels,
                "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                          {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}],
            },
        },
    ]
