"""The kubelet's API (port 10250 on the node address) answers only whom the API server authorises.

Anonymous requests are refused outright, alice's valid token is refused by RBAC
(nodes/proxy is not hers), and the API server's own client certificate is the one
that `kubectl logs` and `exec` travel with. Reached over the node address as any
pod or host process could, with the cluster CA trusted.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest
import yaml

from towline_dev.node.layout import KUBELET_PORT, NODE_ADDRESS
from towline_dev.node.realnode import NodeCluster


def _get(cluster: NodeCluster, path: str, token: str | None = None) -> int:
    assert cluster.plane is not None
    context = ssl.create_default_context(cafile=str(cluster.plane.ca_cert))
    request = urllib.request.Request(f"https://{NODE_ADDRESS}:{KUBELET_PORT}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return error.code


def _token(cluster: NodeCluster, user: str) -> str:
    assert cluster.plane is not None
    config: dict[str, Any] = yaml.safe_load(cluster.plane.kubeconfig.read_text())
    return str(next(u["user"]["token"] for u in config["users"] if u["name"] == user))


@pytest.mark.parametrize("path", ["/pods", "/runningpods/", "/configz", "/logs/"])
def test_kubelet_refuses_anonymous_requests(real_node: NodeCluster, path: str) -> None:
    assert _get(real_node, path) == 401


@pytest.mark.parametrize("user", ["alice", "bob"])
def test_kubelet_refuses_people_without_nodes_proxy(real_node: NodeCluster, user: str) -> None:
    assert _get(real_node, "/pods", _token(real_node, user)) == 403


def test_kubelet_answers_an_authorised_user(real_node: NodeCluster) -> None:
    """The control: the same request with admin's token is served, so the refusals were authz."""
    assert _get(real_node, "/pods", _token(real_node, "admin")) == 200
