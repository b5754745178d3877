"""What the dead-letter tests share: who the API server says a kubeconfig user is, the `orders` Workflow whose runs
fail before their first step when made too early or without their param, and the plugin's listing of run letters."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.pluginsupport import ok, towline
from tests.integration.support import create, wait_for_phase

from towline_dev.controlplane import ControlPlane

RUNS = "workflowruns.towline.dev"


def username(cluster: ControlPlane, user: str) -> str:
    """The username the API server authenticates the kubeconfig's `user` as (what replayed-by must name)."""
    answer = json.loads(cluster.kubectl("auth", "whoami", "-o", "json", user=user).stdout)
    name: str = answer["status"]["userInfo"]["username"]
    return name


def orders(namespace: str) -> dict[str, Any]:
    """A Workflow whose first step is bob's approval (a replay that starts waits there, no Job needed) and whose
    second mounts the Secret crm-api."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "orders", "namespace": namespace},
        "spec": {
            "params": [{"name": "region", "type": "string", "required": True}],
            "steps": [
                {"id": "review", "approval": {"message": "Go?", "approvers": {"users": ["bob"]}}},
                {"id": "sync", "needs": ["review"], "action": "http.request", "credentials": {"crm": "crm-api"},
                 "with": {"url": "https://crm.example/api", "auth": {"bearer": {"credential": "crm", "key": "token"}}},
                 "egress": [{"cidr": "203.0.113.0/24", "ports": [443]}]},
            ],
        },
    }


def early_run(cluster: ControlPlane, namespace: str, name: str, *, requester: str = "alice",
              params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run of Workflow orders the operator fails before any step: made before the Workflow exists, or (params {})
    without the param it requires."""
    create(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                     "metadata": {"name": name, "namespace": namespace},
                     "spec": {"workflowRef": {"name": "orders"},
                              "params": {"region": "emea"} if params is None else params,
                              "requestedBy": requester}}, user=requester)
    return wait_for_phase(cluster, namespace, name, {"Failed"})


def run_letters(cluster: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    """The namespace's letters of kind run, as `kubectl towline deadletters -o json` lists them to an admin."""
    items: list[dict[str, Any]] = json.loads(ok(towline(cluster, namespace, "deadletters", "-o", "json",
                                                        user="admin")))["items"]
    return [item for item in items if item.get("kind") == "run"]
