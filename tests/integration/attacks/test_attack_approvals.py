"""Attacks on approval gates: an Approval counts for exactly one run and step, and only in time."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from tests.integration.attacks.attack_support import (
    APPROVALS,
    RUNS,
    create_as,
    decide,
    gate_approval,
    gated_workflow,
    install,
    jobs_of,
    patch_as,
    refused,
    run_manifest,
)
from tests.integration.support import get, step_status, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]


OWNERSHIP = "Only the Towline operator may change an Approval's labels, ownerReferences or finalizers"


def test_carol_cannot_reuse_bobs_decision_for_her_own_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """The issue's attack, word for word: relabel bob's Approval to a run carol then starts."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, gated_workflow(ns))
    assert create_as(cluster, "carol", run_manifest(ns, "gated", "first", "carol")).returncode == 0
    approval = gate_approval(cluster, ns, "first")
    assert decide(cluster, ns, approval, "bob").returncode == 0
    wait_for_phase(cluster, ns, "first", {"Succeeded"})

    relabel = cluster.kubectl("label", "approval", approval, "-n", ns, "towline.dev/run=carol-sneaky",
                              "--overwrite", user="carol", check=False)
    refused(relabel, OWNERSHIP)
    sneaky = run_manifest(ns, "gated", "carol-sneaky", "carol", params={"who": "carol"})
    assert create_as(cluster, "carol", sneaky).returncode == 0

    own = gate_approval(cluster, ns, "carol-sneaky")
    assert own != approval
    run = get(cluster, RUNS, "carol-sneaky", ns)
    assert run is not None and step_status(run, "review")["phase"] == "Running"
    assert (get(cluster, APPROVALS, own, ns) or {})["spec"].get("decision") is None
    assert jobs_of(cluster, ns, "carol-sneaky", "deploy") == [], "deploy must not run without its own approval"


@pytest.mark.parametrize(("what", "metadata"), [
    ("labels", {"labels": {"towline.dev/run": "elsewhere"}}),
    ("ownerReferences", {"ownerReferences": [{"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                                              "name": "elsewhere", "uid": "00000000-0000-0000-0000-000000000000",
                                              "controller": True}]}),
    ("finalizers", {"finalizers": ["example.com/keep"]}),
])
def test_approvers_cannot_rewrite_what_ties_an_approval_to_its_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
    what: str, metadata: dict[str, object],
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, gated_workflow(ns))
    assert create_as(cluster, "carol", run_manifest(ns, "gated", "tied", "carol")).returncode == 0
    approval = gate_approval(cluster, ns, "tied")
    before = get(cluster, APPROVALS, approval, ns)
    assert before is not None
    for user in ("bob", "carol"):
        refused(patch_as(cluster, user, "approval", approval, ns, {"metadata": metadata}), OWNERSHIP)
    after = get(cluster, APPROVALS, approval, ns)
    assert after is not None and after["metadata"].get(what) == before["metadata"].get(what)
    # A decision alone (the README's patch) is still fine.
    assert decide(cluster, ns, approval, "bob").returncode == 0
    wait_for_phase(cluster, ns, "tied", {"Succeeded"})


def test_a_decision_the_operator_first_sees_after_expiry_never_counts(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """bob decides after the deadline while the operator is down, and wipes the server's record of when."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, gated_workflow(ns, expires_after="20s"))
    assert create_as(cluster, "carol", run_manifest(ns, "gated", "late", "carol")).returncode == 0
    approval = gate_approval(cluster, ns, "late")
    found = get(cluster, APPROVALS, approval, ns)
    assert found is not None
    expires_at = datetime.fromisoformat(found["spec"]["expiresAt"].replace("Z", "+00:00"))
    towline_operator.kill()
    try:
        # The attack is a decision made after the deadline on the API server's clock: real time must pass.
        time.sleep(max(0.0, (expires_at - datetime.now(UTC)).total_seconds()) + 2)
        # Still Pending (nobody marked it Expired), so the admission policy lets the decision in.
        decision = decide(cluster, ns, approval, "bob", metadata={"managedFields": [{}]})
        assert decision.returncode == 0, decision.stderr
    finally:
        towline_operator.start()
    done = wait_for_phase(cluster, ns, "late", {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Failed", done["status"]
    assert step_status(done, "review")["reason"] == "Expired"
    assert jobs_of(cluster, ns, "late", "deploy") == []


def test_an_approver_not_listed_cannot_block_a_gate_by_setting_decided_by_alone(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """alice (approver role, not on the gate's list) once set only `decidedBy`; it is final, so bob never could."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, gated_workflow(ns))
    assert create_as(cluster, "carol", run_manifest(ns, "gated", "blocked", "carol")).returncode == 0
    approval = gate_approval(cluster, ns, "blocked")
    for squat in ({"decidedBy": "alice"}, {"decidedBy": "bob"}, {"reason": "bob said yes"}):
        refused(patch_as(cluster, "alice", "approval", approval, ns, {"spec": squat}),
                "together with spec.decision" if "decidedBy" in squat else "set it together with spec.decision")
    untouched = get(cluster, APPROVALS, approval, ns)
    assert untouched is not None and not {"decidedBy", "decision", "reason"} & set(untouched["spec"])
    decided = decide(cluster, ns, approval, "bob")
    assert decided.returncode == 0, decided.stderr
    done = wait_for_phase(cluster, ns, "blocked", {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert step_status(done, "review")["decidedBy"] == "bob"
