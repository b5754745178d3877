"""Attacks through `spec.retryOf`: a retry runs only what its run ran, and four eyes still mean two people.

Every run here stops at a gate, so nothing needs a node: the attack is on what the
operator and the API server accept, and the evidence is the run's status, its
Events and the Approvals and Jobs it made (or did not).
"""

from __future__ import annotations

import pytest
from tests.integration.attacks.attack_support import (
    APPROVALS,
    RUNS,
    create_as,
    decide,
    gate_approval,
    install,
    jobs_of,
    patch_as,
    refused,
    run_manifest,
)
from tests.integration.support import get, list_objects, step_status, wait_for, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]


def gated(namespace: str, name: str, gate: str, approvers: list[str], action_id: str) -> dict[str, object]:
    """A four-eyes gate `gate` that `approvers` may decide, then one step `action_id`."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "params": [{"name": "who", "type": "string", "default": "nobody"}],
            "steps": [
                {"id": gate, "approval": {"message": "go?", "approvers": {"users": approvers}, "fourEyes": True}},
                {"id": action_id, "needs": [gate], "action": "data.transform",
                 "with": {"data": {"who": "${{ params.who }}"}, "fields": {"who": "data.who"}}},
            ],
        },
    }


def rejected_run(cluster: ControlPlane, ns: str, workflow: str, name: str, user: str, gate: str) -> None:
    """`user` starts a run of `workflow`; bob rejects its gate, so it ends Failed (a run one may retry)."""
    assert create_as(cluster, user, run_manifest(ns, workflow, name, user, params={"who": user})).returncode == 0
    approval = gate_approval(cluster, ns, name, gate)
    rejection = patch_as(cluster, "bob", "approval", approval, ns,
                         {"spec": {"decision": "Rejected", "decidedBy": "bob", "reason": "not now"}})
    assert rejection.returncode == 0, rejection.stderr
    wait_for_phase(cluster, ns, name, {"Failed"})


def test_a_retry_after_the_workflow_was_deleted_and_created_again_is_refused(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """A GitOps replace resets the generation: carol's retry must not bring back the removed steps."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, gated(ns, "replaced", "review", ["bob"], "deploy"))
    rejected_run(cluster, ns, "replaced", "before-replace", "carol", "review")

    cluster.kubectl("delete", "workflow", "replaced", "-n", ns, "--wait=true")
    install(cluster, gated(ns, "replaced", "sign_off", ["bob"], "notify"))
    recreated = get(cluster, "workflows.towline.dev", "replaced", ns)
    assert recreated is not None and recreated["metadata"]["generation"] == 1, "the replace must reset the generation"

    retry = run_manifest(ns, "replaced", "carol-retry", "carol", retryOf={"run": "before-replace", "reuse": []})
    assert create_as(cluster, "carol", retry).returncode == 0
    run = wait_for_phase(cluster, ns, "carol-retry", {"Failed", "AwaitingApproval", "Running", "Succeeded"})
    message = (run.get("status") or {}).get("message") or ""
    assert run["status"]["phase"] == "Failed", f"the retry ran the removed definition: {run['status']}"
    assert "workflow 'replaced' was deleted and created again since run 'before-replace'" in message
    assert "start a new run instead" in message
    assert list_objects(cluster, APPROVALS, ns, "towline.dev/run=carol-retry") == []
    assert jobs_of(cluster, ns, "carol-retry") == []
    events = wait_for("the RunInvalid Event", lambda: [
        event for event in list_objects(cluster, "events", ns)
        if event["involvedObject"].get("name") == "carol-retry" and event.get("reason") == "RunInvalid"])
    assert "was deleted and created again" in events[0]["message"]


def test_the_requester_of_a_retried_run_cannot_approve_the_retrys_four_eyes_gate(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """carol chose the params, bob pressed retry: under four eyes carol may not approve the retry."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, gated(ns, "paired", "review", ["bob", "carol"], "deploy"))
    rejected_run(cluster, ns, "paired", "carols-run", "carol", "review")

    retry = run_manifest(ns, "paired", "bobs-retry", "bob", retryOf={"run": "carols-run", "reuse": []})
    assert create_as(cluster, "bob", retry).returncode == 0
    approval = gate_approval(cluster, ns, "bobs-retry")
    spec = (get(cluster, APPROVALS, approval, ns) or {})["spec"]
    assert (spec.get("requestedBy"), spec.get("earlierRequesters")) == ("bob", ["carol"])

    refused(decide(cluster, ns, approval, "carol"),
            "four-eyes approval: carol requested the run this one retries (its params are theirs)")
    refused(decide(cluster, ns, approval, "bob"), "four-eyes approval: bob started this run")
    run = get(cluster, RUNS, "bobs-retry", ns)
    assert run is not None and step_status(run, "review")["phase"] == "Running"
    assert jobs_of(cluster, ns, "bobs-retry", "deploy") == []
