"""Attacks on the policy's approval gate: an upstream gate that was skipped or is laxer never stands in for it.

The workflow's policy requires bob's four-eyes approval before any mutating
step. carol, a runner who is also listed on a laxer gate the author wrote,
tries to reach the mutating step without bob: the run must wait at the
policy's own gate and no Job for the mutating step may exist.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.support import ScriptedServer, apply, get, list_objects, start_run, step_status, wait_for

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

POLICY = {"approval": {"requireForMutatingActions": True, "approvers": {"users": ["bob"]}, "fourEyes": True,
                       "expiresAfter": "10m"}}


def gated_workflow(namespace: str, name: str, api: str, gate: dict[str, Any], **deploy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "policy": POLICY,
            "steps": [
                {"id": "review", **gate},
                {"id": "deploy", "needs": ["review"], "action": "http.request",
                 "with": {"url": f"{api}/deploy", "method": "POST", "json": {"go": True}},
                 **deploy},
            ],
        },
    }


def waiting_at_policy_gate(cluster: ControlPlane, namespace: str, run: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = get(cluster, "workflowruns.towline.dev", run, namespace) or {}
        status = found.get("status") or {}
        ids = [step["id"] for step in status.get("steps", [])]
        return found if status.get("phase") == "AwaitingApproval" and "deploy__approval" in ids else None

    return dict(wait_for(f"run {run} to wait at the policy's gate deploy__approval", probe))


def deploy_jobs(cluster: ControlPlane, namespace: str, run: str) -> list[str]:
    jobs = list_objects(cluster, "jobs", namespace, f"towline.dev/run={run},towline.dev/step=deploy")
    return [job["metadata"]["name"] for job in jobs]


def test_a_skipped_gate_upstream_does_not_skip_the_policy_gate(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        deploys = api.script("/deploy", (200, {"ok": True}, {}))
        gate = {"when": "false", "approval": {"approvers": {"users": ["bob"]}, "fourEyes": True}}
        apply(cluster, gated_workflow(ns, "skip-gate", api.url, gate, runIfSkipped=True))
        start_run(cluster, ns, "skip-gate", "skip-gate-run", user="carol")
        run = waiting_at_policy_gate(cluster, ns, "skip-gate-run")
        assert step_status(run, "review")["phase"] == "Skipped"
        assert "deploy" not in [step["id"] for step in run["status"]["steps"]]  # never started
        name = step_status(run, "deploy__approval")["approvalName"]
        approval = wait_for("the policy's Approval", lambda: get(cluster, "approvals.towline.dev", name, ns))
        assert approval is not None and approval["spec"]["approvers"]["users"] == ["bob"]
        assert approval["spec"]["fourEyes"] is True
        assert deploy_jobs(cluster, ns, "skip-gate-run") == [] and deploys.requests == []


def test_a_laxer_gate_carol_approves_herself_does_not_skip_the_policy_gate(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        deploys = api.script("/deploy", (200, {"ok": True}, {}))
        gate = {"approval": {"approvers": {"users": ["carol"]}, "expiresAfter": "10m"}}
        apply(cluster, gated_workflow(ns, "lax-gate", api.url, gate))
        start_run(cluster, ns, "lax-gate", "lax-gate-run", user="carol")

        def review_approval() -> str | None:
            found = get(cluster, "workflowruns.towline.dev", "lax-gate-run", ns) or {}
            steps = {s["id"]: s for s in (found.get("status") or {}).get("steps", [])}
            return steps.get("review", {}).get("approvalName")

        name = wait_for("the review Approval", review_approval)
        wait_for("the Approval object", lambda: get(cluster, "approvals.towline.dev", name, ns))
        patched = cluster.kubectl("patch", "approval", name, "-n", ns, "--type", "merge", "-p",
                                  json.dumps({"spec": {"decision": "Approved", "decidedBy": "carol"}}),
                                  user="carol", check=False)
        assert patched.returncode == 0, patched.stderr  # the author's own gate lets carol decide it
        run = waiting_at_policy_gate(cluster, ns, "lax-gate-run")
        assert step_status(run, "review")["phase"] == "Succeeded"
        assert deploy_jobs(cluster, ns, "lax-gate-run") == [] and deploys.requests == []
