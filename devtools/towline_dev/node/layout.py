"""Addresses, names and configuration files of the local node: pure functions, no I/O.

Every address is taken from the documentation ranges (RFC 5737), so nothing the
node or a test sends can ever be meant for a real host, and traffic to a
private range never appears:

- 198.51.100.0/25   pods (the CNI bridge is its gateway, .1)
- 198.51.100.128/26 Services (the API server's Service is .129, cluster DNS is .138)
- 198.51.100.250    the node itself: kubelet and API server listen here (an interface of its own)
- 198.51.100.192/27 test hosts the integration tests put in a network namespace

203.0.113.0/24 is left alone: this machine reaches its package mirrors through an
address there, and a route for test hosts would cut them off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NODE_NAME = "towline-node"
NODE_ADDRESS = "198.51.100.250"
NODE_INTERFACE = "towline-node0"
"""A port-less bridge holding NODE_ADDRESS, so the address exists before any pod does."""
POD_CIDR = "198.51.100.0/25"
POD_GATEWAY = "198.51.100.1"
SERVICE_CIDR = "198.51.100.128/26"
KUBERNETES_SERVICE_IP = "198.51.100.129"
CLUSTER_DNS_IP = "198.51.100.138"
CLUSTER_DOMAIN = "cluster.local"
BRIDGE = "towline-cni0"
CNI_NETWORK = "towline"
KUBELET_PORT = 10250
SANDBOX_IMAGE = "localhost/towline-pause:dev"
COREDNS_IMAGE = "localhost/towline-coredns:dev"
LOCAL_PATH_IMAGE = "localhost/towline-local-path-provisioner:dev"
CNI_BIN_DIR = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"


@dataclass(frozen=True)
class NodePaths:
    """Everything the node writes lives under one state directory, except what the kernel
    and the runtime keep elsewhere (netns, mounts, iptables, shims): see `cleanup`."""

    root: Path

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def registry_hosts_dir(self) -> Path:
        """containerd's `config_path`: a `<host:port>/hosts.toml` here tells it how to reach that registry
        (e.g. which CA to trust: `towline_dev.registry`); a host without one is reached the default way."""
        return self.root / "containerd" / "certs.d"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs_dir(self) -> Path:
        return self.root / "pod-logs"

    @property
    def pki_dir(self) -> Path:
        return self.root / "pki"

    @property
    def volumes_dir(self) -> Path:
        """Where the `local-path` StorageClass makes each PersistentVolume's directory (`towline_dev.node.addons`):
        the node's own, so a stop that removes the state directory removes every volume with it."""
        return self.root / "volumes"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def log_path(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these ASCII paths


def containerd_config(paths: NodePaths) -> str:
    """containerd 1.6 (config version 2) for the CRI plugin only, rooted in the state directory.

    `restrict_oom_score_adj`: root on this machine lacks CAP_SYS_RESOURCE, and runc fails
    every sandbox when it cannot lower oom_score_adj.

    `netns_mounts_under_state_dir`: a pod's network namespace is mounted under the state directory
    (`containerd/state/io.containerd.grpc.v1.cri/netns/cni-<uuid>`), not in the machine's `/run/netns`:
    the node's own, unmounted with the rest of it, and never mistaken for another node's (docs/real-node.md).
    """
    base = paths.root / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join([
        "version = 2",
        f"root = {_toml_string(str(base / 'root'))}",
        f"state = {_toml_string(str(base / 'state'))}",
        'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", '
        '"io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", '
        '"io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
        "",
        "[grpc]",
        f"  address = {_toml_string(str(paths.containerd_socket))}",
        "",
        "[ttrpc]",
        f"  address = {_toml_string(str(paths.containerd_socket) + '.ttrpc')}",
        "",
        f"[{cri}]",
        f"  sandbox_image = {_toml_string(SANDBOX_IMAGE)}",
        "  restrict_oom_score_adj = true",
        "  enable_selinux = false",
        "  disable_apparmor = true",
        "  netns_mounts_under_state_dir = true",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f"  BinaryName = {_toml_string(RUNC)}",
        f"[{cri}.registry]",
        f"  config_path = {_toml_string(str(paths.registry_hosts_dir))}",
        f"[{cri}.cni]",
        f"  bin_dir = {_toml_string(CNI_BIN_DIR)}",
        f"  conf_dir = {_toml_string(str(paths.cni_conf_dir))}",
        "  max_conf_num = 1",
        "",
    ])


def cni_config(paths: NodePaths) -> dict[str, Any]:
    """A bridge with host-local addresses; no masquerade, so pod traffic never leaves as the node."""
    return {
        "cniVersion": "0.4.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": POD_GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(paths.root / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(paths: NodePaths, *, ca_file: Path, healthz_port: int) -> dict[str, Any]:
    """KubeletConfiguration for this machine: cgroup v1 with cgroupfs and no QoS hierarchy,
    x509 + webhook authentication (anonymous off), webhook authorization, cluster DNS."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": NODE_ADDRESS,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(paths.pki_dir / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(paths.pki_dir / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [CLUSTER_DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "",
        "podLogsDir": str(paths.pod_logs_dir),
        "failSwapOn": False,
        "serializeImagePulls": False,
        # Kubernetes 1.35 re-verifies credentials before a pod may use an image the kubelet once pulled with a
        # pull secret (KubeletEnsureSecretPulledImages). The node's own images (`localhost/`) are imported, never
        # pulled: exempt them, or a pod would try to pull `localhost/towline:dev` once the same image (same ID)
        # came from a private registry (tests/integration/helm/test_private_registry.py). Others are verified.
        "imagePullCredentialsVerificationPolicy": "NeverVerifyAllowlistedImages",
        "preloadedImagesVerificationAllowlist": ["localhost/*"],
        # The disk is shared with builds and caches; evict only when it is really full.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "maxPods": 60,
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "0s",
    }


def kube_proxy_config(*, kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "hostnameOverride": NODE_NAME,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # Leave the machine's conntrack table size alone.
        "conntrack": {"maxPerCore": 0, "min": 0},
        "nodePortAddresses": [f"{NODE_ADDRESS}/32"],
    }


def corefile() -> str:
    """Cluster DNS only: names under cluster.local from the API, everything else refused."""
    return "\n".join([
        f"{CLUSTER_DOMAIN}:53 {{",
        "    errors",
        "    health :8080",
        "    ready :8181",
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{",
        "        pods insecure",
        "        ttl 5",
        "    }",
        "}",
        ".:53 {",
        "    errors",
        "    template ANY ANY {",
        "        rcode REFUSED",
        "    }",
        "}",
        "",
    ])


def dump_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False)
