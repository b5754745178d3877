"""What the node installs through the API: kube-router's role, CoreDNS, and the default StorageClass.

CoreDNS runs like any workload (a Deployment in kube-system labelled
``k8s-app: kube-dns`` behind the ``kube-dns`` Service on the cluster DNS IP), so a
step's NetworkPolicy reaches it the way it would on a real cluster.

Volumes come from Rancher's local-path-provisioner (what kind and k3s ship): the StorageClass
``local-path``, the cluster's default, makes each PersistentVolume a directory of the node's own
state directory, so a node's volumes never meet another node's (worlds) and go with its state.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from towline.jsontypes import JSON
from towline_dev.node.credentials import KUBE_ROUTER
from towline_dev.node.layout import CLUSTER_DNS_IP, COREDNS_IMAGE, LOCAL_PATH_IMAGE, corefile
from towline_dev.node.nodeimages import TEST_IMAGE


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


def _addon_deployment(
    name: str, labels: JSON, *, service_account: str, container: JSON, config: tuple[str, str], namespace: str,
    pod: JSON | None = None, pod_security: JSON | None = None,
) -> JSON:
    """A node addon's one-replica Deployment, hardened as every addon is: non-root uid 65532, RuntimeDefault
    seccomp, no privilege escalation, a read-only root filesystem, no capability; its ConfigMap `config` =
    (name, mount path) mounted read-only."""
    config_map, mount = config
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": service_account,
                    **(pod or {}),
                    "securityContext": {
                        "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                        **(pod_security or {}),
                    },
                    "containers": [{
                        **container,
                        "securityContext": {
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [{"name": "config", "mountPath": mount, "readOnly": True}],
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": config_map}}],
                },
            },
        },
    }


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
        _addon_deployment(
            "coredns", labels, service_account="coredns",
            # Port 53 without any capability.
            pod_security={"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}]},
            container={
                "name": "coredns",
                "image": COREDNS_IMAGE,
                "imagePullPolicy": "Never",
                "args": ["-conf", "/etc/coredns/Corefile"],
                "ports": [{"containerPort": 53, "protocol": "UDP", "name": "dns"},
                          {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}},
            },
            config=("coredns", "/etc/coredns"), namespace="kube-system"),
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


LOCAL_PATH_NAMESPACE = "local-path-storage"
LOCAL_PATH_CLASS = "local-path"
LOCAL_PATH_PROVISIONER = "rancher.io/local-path"
LOCAL_PATH_ACCOUNT = "local-path-provisioner"
_CONFIG_DIR = "/etc/config/"

# The provisioner's setup and teardown scripts, as upstream ships them (deploy/local-path-storage.yaml). It runs
# them as `/bin/sh /script/setup` in a helper pod, with the volume's directory in VOL_DIR.
_SETUP = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
_TEARDOWN = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'


def local_path_helper_pod() -> JSON:
    """The template of the pods that make and remove a volume's directory (the provisioner adds the command,
    the node, the ConfigMap's scripts and the volumes directory as a hostPath).

    Root, because they work in the node's root-owned volumes directory, with no capability but DAC_OVERRIDE: a
    teardown must remove whatever a pod of any user left in the volume. The provisioner gives them its own
    ServiceAccount, so they mount no token."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}],
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "helper-pod",  # the provisioner reads the helper's log by this name
                "image": TEST_IMAGE,
                "imagePullPolicy": "Never",
                "securityContext": {
                    "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
                    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]},
                },
            }],
        },
    }


def local_path_config(volumes_dir: Path) -> JSON:
    """config.json: every node (there is one) keeps its volumes in `volumes_dir`."""
    return {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(volumes_dir)]}]}


def _local_path_rbac() -> list[JSON]:
    """Less than upstream's: the provisioner reads its configuration from the mounted ConfigMap (so no
    ConfigMap read), and touches pods only in its own namespace (its helper pods, and their logs)."""
    name = "towline-dev:local-path-provisioner"
    account = {"kind": "ServiceAccount", "name": LOCAL_PATH_ACCOUNT, "namespace": LOCAL_PATH_NAMESPACE}
    meta = {"name": name, "namespace": LOCAL_PATH_NAMESPACE}
    return [
        _cluster_role(name, [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": _READ},
            {"apiGroups": [""], "resources": ["persistentvolumes"],
             "verbs": [*_READ, "create", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": _READ},
        ]),
        _binding(name, account),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "delete"]},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [account]},
    ]


def local_path_manifests(volumes_dir: Path) -> list[JSON]:
    """The provisioner (namespace, account, RBAC, ConfigMap, Deployment) and the default StorageClass."""
    labels = {"app": "local-path-provisioner"}
    meta = {"namespace": LOCAL_PATH_NAMESPACE}
    return [
        # Privileged: the helper pods mount the volumes directory (hostPath) and run as root.
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": LOCAL_PATH_NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": LOCAL_PATH_ACCOUNT, **meta}},
        *_local_path_rbac(),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local-path-config", **meta}, "data": {
            "config.json": json.dumps(local_path_config(volumes_dir), indent=2),
            "setup": _SETUP,
            "teardown": _TEARDOWN,
            "helperPod.yaml": yaml.safe_dump(local_path_helper_pod(), sort_keys=False),
        }},
        # It only talks to the API server: the helper pods do the work on the node.
        _addon_deployment(
            "local-path-provisioner", labels, service_account=LOCAL_PATH_ACCOUNT, pod={"enableServiceLinks": False},
            container={
                "name": "local-path-provisioner",
                "image": LOCAL_PATH_IMAGE,
                "imagePullPolicy": "Never",
                "args": [
                    "--debug", "start", "--config", f"{_CONFIG_DIR}config.json",
                    "--helper-pod-file", f"{_CONFIG_DIR}helperPod.yaml",
                    "--service-account-name", LOCAL_PATH_ACCOUNT,
                ],
                "env": [
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    # Where it reloads helperPod.yaml from (every 30 s).
                    {"name": "CONFIG_MOUNT_PATH", "value": _CONFIG_DIR},
                ],
            },
            config=("local-path-config", _CONFIG_DIR), namespace=LOCAL_PATH_NAMESPACE),
        {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": LOCAL_PATH_CLASS,
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": LOCAL_PATH_PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    ]
