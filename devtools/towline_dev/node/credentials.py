"""Certificates and kubeconfigs of the node's components, signed by the control plane's CA.

Each component gets its own client certificate, so the API server's authorizers
see who it is: the kubelet as ``system:node:<name>`` in ``system:nodes`` (the Node
authorizer), kube-proxy as ``system:kube-proxy`` and the scheduler as
``system:kube-scheduler`` (both bound by the API server's bootstrap RBAC), and
kube-router as ``towline-dev:kube-router`` (bound to a read-only role in `addons`).
Keys are written with mode 0600 into the node's pki directory only.
"""

from __future__ import annotations

import base64
import datetime
from dataclasses import dataclass
from pathlib import Path

from towline_dev.certs import issue_leaf, load_ca, write_key_pair
from towline_dev.kubeconfig import CLUSTER_NAME, write_kubeconfig
from towline_dev.node.layout import NODE_ADDRESS, NODE_NAME, NodePaths


@dataclass(frozen=True)
class Identity:
    component: str
    common_name: str
    organizations: tuple[str, ...] = ()


KUBELET = Identity("kubelet", f"system:node:{NODE_NAME}", ("system:nodes",))
KUBE_PROXY = Identity("kube-proxy", "system:kube-proxy")
KUBE_SCHEDULER = Identity("kube-scheduler", "system:kube-scheduler")
KUBE_ROUTER = Identity("kube-router", "towline-dev:kube-router")
IDENTITIES = (KUBELET, KUBE_PROXY, KUBE_SCHEDULER, KUBE_ROUTER)


def kubeconfig_path(paths: NodePaths, identity: Identity) -> Path:
    return paths.pki_dir / f"{identity.component}.kubeconfig"


def write_node_credentials(paths: NodePaths, *, control_plane_pki: Path, server: str) -> None:
    """A kubeconfig per component (client certificate inline) and the kubelet's serving pair."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = load_ca(control_plane_pki)
    ca_pem = (control_plane_pki / "ca.crt").read_bytes()
    paths.pki_dir.mkdir(parents=True, exist_ok=True)
    for identity in IDENTITIES:
        key, cert = issue_leaf(
            now, ca_key, ca_cert, common_name=identity.common_name, organizations=identity.organizations
        )
        cert_path = paths.pki_dir / f"{identity.component}.crt"
        key_path = paths.pki_dir / f"{identity.component}.key"
        write_key_pair(cert_path, key_path, key, cert)
        write_kubeconfig(kubeconfig_path(paths, identity), {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CLUSTER_NAME, "cluster": {
                "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode("ascii"),
            }}],
            "users": [{"name": identity.common_name, "user": {
                "client-certificate": str(cert_path), "client-key": str(key_path),
            }}],
            "contexts": [{"name": identity.component, "context": {
                "cluster": CLUSTER_NAME, "user": identity.common_name,
            }}],
            "current-context": identity.component,
        })
    key, cert = issue_leaf(
        now, ca_key, ca_cert, common_name=f"system:node:{NODE_NAME}", organizations=("system:nodes",),
        server_names=(NODE_NAME,), server_ips=(NODE_ADDRESS,),
    )
    write_key_pair(paths.pki_dir / "kubelet-serving.crt", paths.pki_dir / "kubelet-serving.key", key, cert)
