"""What the egress attack tests share: a one-step Workflow, a run of it to its end, and what a policy lets out."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from tests.integration.support import wait_for_phase

from towline_dev.controlplane import ControlPlane


def one_step(namespace: str, name: str, step: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"steps": [{"id": "call", "retry": {"limit": 0}, **step}]}}


def start(cluster: ControlPlane, namespace: str, workflow: str, run: str) -> dict[str, Any]:
    cluster.kubectl("create", "-f", "-", user="carol", stdin=json.dumps({
        "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun", "metadata": {"name": run, "namespace": namespace},
        "spec": {"workflowRef": {"name": workflow}, "requestedBy": "carol"}}))
    return wait_for_phase(cluster, namespace, run, {"Succeeded", "Failed"})


def allowed_by(policy: dict[str, Any], address: str) -> bool:
    ip = ipaddress.ip_address(address)
    for rule in policy["spec"].get("egress", []):
        for peer in rule.get("to", []):
            block = peer.get("ipBlock")
            if block is None:
                continue
            net = ipaddress.ip_network(block["cidr"])
            carved = [ipaddress.ip_network(c) for c in block.get("except", [])]
            if ip.version == net.version and ip in net and not any(ip in c for c in carved if c.version == ip.version):
                return True
    return False
