"""Attacks through a retry that changes something (spec.retryOf.workflowChanged, spec.params): carol writes the
WorkflowRun herself, past the plugin's checks, to reuse an output the Workflow now computes otherwise or that was
computed from a param she changes. The operator refuses each before any Job or Approval; the plugin says so before
it creates anything."""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.attacks.attack_support import (
    APPROVALS,
    create_as,
    gate_approval,
    install,
    jobs_of,
    patch_as,
    run_manifest,
)
from tests.integration.pluginsupport import towline
from tests.integration.support import list_objects, step_status, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]


def shaped(namespace: str, field: str) -> dict[str, Any]:
    """shape (reads params.who) -> review (bob decides) -> deploy."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "shaped", "namespace": namespace},
        "spec": {"params": [{"name": "who", "type": "string", "default": "nobody"}],
                 "steps": [{"id": "shape", "action": "data.transform",
                            "with": {"data": {"who": "${{ params.who }}"}, "fields": {field: "data.who"}}},
                           {"id": "review", "needs": ["shape"],
                            "approval": {"message": "go?", "approvers": {"users": ["bob"]}}},
                           {"id": "deploy", "needs": ["review"], "action": "data.transform",
                            "with": {"data": {}, "fields": {"ok": "true"}}}]},
    }


def refused_at_once(cluster: ControlPlane, ns: str, name: str, says: str) -> None:
    run = wait_for_phase(cluster, ns, name, {"Failed", "AwaitingApproval", "Running", "Succeeded"})
    assert run["status"]["phase"] == "Failed", f"the retry started: {run['status']}"
    assert says in (run["status"].get("message") or ""), run["status"]
    assert jobs_of(cluster, ns, name) == []
    assert list_objects(cluster, APPROVALS, ns, f"towline.dev/run={name}") == []


def test_a_retry_cannot_reuse_an_output_the_workflow_now_computes_otherwise_or_from_a_changed_param(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, test_hosts: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, shaped(ns, "who"))
    assert create_as(cluster, "carol", run_manifest(ns, "shaped", "first", "carol", params={"who": "carol"})) \
        .returncode == 0
    approval = gate_approval(cluster, ns, "first", "review")
    assert step_status(wait_for_phase(cluster, ns, "first", {"AwaitingApproval"}), "shape")["phase"] == "Succeeded"
    assert patch_as(cluster, "bob", "approval", approval, ns,
                    {"spec": {"decision": "Rejected", "decidedBy": "bob", "reason": "not now"}}).returncode == 0
    wait_for_phase(cluster, ns, "first", {"Failed"})

    # Another value for the param shape read: its output cannot be reused.
    forged = run_manifest(ns, "shaped", "other-params", "carol", params={"who": "mallory"},
                          retryOf={"run": "first", "reuse": ["shape"]})
    assert create_as(cluster, "carol", forged).returncode == 0
    refused_at_once(cluster, ns, "other-params", "step 'shape' reads params.who, which this retry changes")

    # Fixed in git: shape is now defined otherwise, so its old output cannot stand in for it.
    install(cluster, shaped(ns, "name"))
    forged = run_manifest(ns, "shaped", "changed-step", "carol",
                          retryOf={"run": "first", "reuse": ["shape"], "workflowChanged": True})
    assert create_as(cluster, "carol", forged).returncode == 0
    refused_at_once(cluster, ns, "changed-step", "step(s) shape succeeded in run 'first' but differ in workflow "
                                                 "'shaped' now")

    # The plugin says the same before it creates anything.
    before = {run["metadata"]["name"] for run in list_objects(cluster, "workflowruns.towline.dev", ns)}
    said = towline(cluster, ns, "retry", "first", "--workflow-changed")
    assert said.returncode == 2 and "step(s) shape succeeded in run first but differ" in said.stderr
    assert said.stderr.count("\n") == 1 and "Traceback" not in said.stderr
    assert {run["metadata"]["name"] for run in list_objects(cluster, "workflowruns.towline.dev", ns)} == before
