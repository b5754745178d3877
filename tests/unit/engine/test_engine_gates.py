"""Approval gates (written and policy-inserted), approval expiry, and wait steps."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from engine_harness import T0, CloseApproval, Sim, action, workflow

from towline.engine import CreateApproval, RecordApprovalDecision, gate_id

REVIEW = {
    "id": "review", "needs": ["load"],
    "approval": {"message": "Create ${{ size(steps.load.output.accounts) }} tasks?",
                 "approvers": {"groups": ["account-managers"]}, "fourEyes": True, "expiresAfter": "24h"},
}
CREATE = {
    "id": "create_tasks", "needs": ["review"], "action": "tasks.create", "credentials": {"tasks": "tasks-api"},
    "with": {"json": "${{ steps.load.output.accounts }}"},
}


def gated_run(**policy: object) -> Sim:
    sim = Sim(workflow([action("load"), REVIEW, CREATE], policy=policy))
    sim.reconcile()
    sim.finish("load", output={"accounts": [{"id": 1}, {"id": 2}]})
    sim.reconcile()
    return sim


def test_approval_step_requests_one_approval_and_the_run_awaits_it() -> None:
    sim = gated_run()
    sim.reconcile()
    assert len(sim.requested) == 1 and sim.phase == "AwaitingApproval"
    assert sim.status.current_step == "review"
    request = sim.requested[0]
    assert request.name == f"{sim.name}-review"
    assert request.expires_at == T0 + timedelta(hours=24)
    assert (request.four_eyes, request.requested_by, request.approvers.groups) == (True, "alice", ["account-managers"])
    assert sim.status.wake_at == request.expires_at


def test_approval_message_is_rendered_and_the_preview_names_only_credential_references() -> None:
    request = gated_run().requested[0]
    assert request.message == "Create 2 tasks?"
    assert request.preview == {"steps": [{
        "id": "create_tasks", "action": "tasks.create", "with": {"json": [{"id": 1}, {"id": 2}]},
        "rendered": True, "credentials": {"tasks": "tasks-api"},
    }]}


def test_approved_gate_records_who_decided_and_the_run_continues() -> None:
    sim = gated_run()
    sim.decide_approval("review", "Approved", by="bob")
    sim.reconcile()
    step = sim.step("review")
    assert (step.phase, step.decided_by, step.reason) == ("Succeeded", "bob", "Approved")
    assert sim.started() == ["load", "create_tasks"]
    assert sim.events("ApprovalApproved")


def test_rejected_gate_fails_the_run_naming_who_and_why() -> None:
    sim = gated_run()
    sim.decide_approval("review", "Rejected", by="carol", reason="wrong quarter")
    sim.reconcile()
    assert sim.phase_of("review") == "Failed" and sim.phase_of("create_tasks") == "Skipped"
    assert sim.phase == "Failed"
    succeeded = sim.condition("Succeeded")
    assert succeeded.reason == "ApprovalRejected"
    assert "carol" in succeeded.message and "wrong quarter" in succeeded.message


def test_on_failure_continue_does_not_let_a_rejected_gate_through() -> None:
    sim = Sim(workflow([{"id": "review", "approval": {}, "onFailure": "continue"}, action("go", "review")]))
    sim.reconcile()
    sim.decide_approval("review", "Rejected")
    sim.reconcile()
    assert sim.phase_of("go") == "Skipped" and sim.phase == "Failed"


def test_undecided_approval_expires_at_its_expiry_time() -> None:
    sim = gated_run()
    sim.advance(hours=23, seconds=3599)
    sim.reconcile()
    assert sim.phase_of("review") == "Running"
    sim.advance(1)
    sim.reconcile()
    assert (sim.phase_of("review"), sim.step("review").reason) == ("Failed", "Expired")
    assert sim.of_type(CloseApproval) == [CloseApproval(f"{sim.name}-review", "Expired")]
    assert sim.phase == "Failed" and sim.condition("Succeeded").reason == "ApprovalExpired"
    assert "expired" in (sim.status.message or "")


def test_approval_that_expires_while_suspended_fails_the_gate() -> None:
    sim = gated_run()
    sim.set_spec(suspend=True)
    sim.reconcile()
    sim.advance(hours=25)
    sim.reconcile()
    assert sim.phase_of("review") == "Failed" and any(a.phase == "Expired" for a in sim.of_type(CloseApproval))
    sim.set_spec(suspend=False)
    sim.reconcile()
    assert sim.phase == "Failed" and sim.condition("Succeeded").reason == "ApprovalExpired"
    assert "create_tasks" not in sim.started()


def test_decision_made_after_expiry_does_not_count() -> None:
    sim = gated_run()
    sim.advance(hours=25)
    sim.decide_approval("review", "Approved")
    sim.reconcile()
    assert sim.phase_of("review") == "Failed" and sim.step("review").reason == "Expired"


def test_an_unrecorded_decision_counts_from_when_the_operator_first_sees_it() -> None:
    sim = gated_run()
    sim.advance(hours=2)
    sim.decide_approval("review", "Approved")
    sim.approvals["review"] = replace(sim.approvals["review"], decided_at=None)  # nothing the decider wrote
    decision = sim.reconcile()
    assert sim.phase_of("review") == "Succeeded" and sim.step("review").finished_at == sim.now
    recorded = [a for a in decision.actions if isinstance(a, RecordApprovalDecision)]
    assert [r.decided_at for r in recorded] == [sim.now]


def test_an_unrecorded_decision_first_seen_after_expiry_never_counts() -> None:
    sim = gated_run()
    sim.advance(hours=24)
    sim.decide_approval("review", "Approved")
    sim.approvals["review"] = replace(sim.approvals["review"], decided_at=None)
    sim.reconcile()
    assert (sim.phase_of("review"), sim.step("review").reason) == ("Failed", "Expired")
    assert "create_tasks" not in sim.started()


def test_approval_request_survives_a_crash_with_its_original_expiry() -> None:
    sim = Sim(workflow([action("load"), REVIEW, CREATE]))
    sim.reconcile()
    sim.finish("load", output={"accounts": []})
    sim.reconcile(persist=False)  # Approval created, status lost
    sim.advance(hours=1)
    sim.reconcile()
    assert len(sim.requested) == 1
    assert sim.step("review").expires_at == T0 + timedelta(hours=24)


def test_cancel_cancels_an_open_approval() -> None:
    sim = gated_run()
    sim.set_spec(cancel=True)
    sim.reconcile()
    assert sim.of_type(CloseApproval) == [CloseApproval(f"{sim.name}-review", "Cancelled")]
    assert sim.phase_of("review") == "Cancelled" and sim.phase == "Cancelled"


def policy_run(*steps: dict[str, object]) -> Sim:
    policy = {"approval": {"requireForMutatingActions": True, "approvers": {"users": ["dana"]}, "expiresAfter": "1h"}}
    return Sim(workflow(list(steps), policy=policy))


def test_policy_inserts_a_gate_before_a_mutating_step() -> None:
    sim = policy_run({"id": "update", "action": "crm.update", "with": {"id": 7}})
    sim.reconcile()
    gate = sim.step(gate_id("update"))
    assert (gate.id, gate.phase, gate.gate_for) == ("update__approval", "Running", "update")
    assert sim.created == [] and sim.phase == "AwaitingApproval"
    request: CreateApproval = sim.requested[0]
    assert request.approvers.users == ["dana"] and request.expires_at == T0 + timedelta(hours=1)
    assert request.preview["steps"][0]["with"] == {"id": 7}
    sim.decide_approval("update__approval", "Approved", by="dana")
    sim.reconcile()
    assert sim.started() == ["update"] and sim.created[0].mutating


def test_policy_gate_is_not_inserted_for_read_only_steps() -> None:
    sim = policy_run(action("read", **{"with": {"method": "GET"}}))
    sim.reconcile()
    assert sim.started() == ["read"] and sim.requested == []


def test_policy_gate_follows_the_rendered_inputs() -> None:
    sim = policy_run(action("call", **{"with": {"method": "${{ 'PO' + 'ST' }}"}}))
    sim.reconcile()
    assert sim.started() == [] and sim.requested[0].step_id == "call__approval"


def test_policy_gate_is_not_inserted_when_an_approved_gate_as_strict_is_directly_upstream() -> None:
    sim = policy_run({"id": "ok", "approval": {"approvers": {"users": ["dana"]}}},
                     {"id": "update", "action": "crm.update", "needs": ["ok"]})
    sim.reconcile()
    sim.decide_approval("ok", "Approved")
    sim.reconcile()
    assert [r.step_id for r in sim.requested] == ["ok"] and sim.started() == ["update"]


def test_a_skipped_upstream_gate_does_not_stand_in_for_the_policy_gate() -> None:
    sim = policy_run({"id": "ok", "when": "false", "approval": {"approvers": {"users": ["dana"]}}},
                     {"id": "update", "action": "crm.update", "needs": ["ok"], "runIfSkipped": True})
    sim.reconcile()
    assert sim.phase_of("ok") == "Skipped"
    assert sim.started() == [] and [r.step_id for r in sim.requested] == ["update__approval"]
    assert sim.phase == "AwaitingApproval"


def test_an_upstream_gate_with_other_approvers_does_not_stand_in_for_the_policy_gate() -> None:
    sim = policy_run({"id": "ok", "approval": {"approvers": {"users": ["dana", "mallory"]}}},
                     {"id": "update", "action": "crm.update", "needs": ["ok"]})
    sim.reconcile()
    sim.decide_approval("ok", "Approved", by="mallory")
    sim.reconcile()
    assert sim.started() == [] and [r.step_id for r in sim.requested] == ["ok", "update__approval"]
    assert sim.requested[1].approvers.users == ["dana"]


def test_an_upstream_gate_without_four_eyes_does_not_stand_in_for_a_four_eyes_policy() -> None:
    policy = {"approval": {"requireForMutatingActions": True, "fourEyes": True, "approvers": {"groups": ["ops"]}}}
    sim = Sim(workflow([{"id": "ok", "approval": {"approvers": {"groups": ["ops"]}}},
                        {"id": "update", "action": "crm.update", "needs": ["ok"]}], policy=policy))
    sim.reconcile()
    sim.decide_approval("ok", "Approved", by="alice")
    sim.reconcile()
    assert sim.started() == [] and sim.requested[-1].step_id == "update__approval" and sim.requested[-1].four_eyes


def test_rejected_policy_gate_skips_the_step_and_fails_the_run() -> None:
    sim = policy_run({"id": "update", "action": "crm.update"})
    sim.reconcile()
    sim.decide_approval("update__approval", "Rejected", by="dana", reason="not today")
    sim.reconcile()
    assert sim.phase_of("update") == "Skipped" and sim.created == []
    assert sim.phase == "Failed" and sim.condition("Succeeded").reason == "ApprovalRejected"


def test_retry_of_a_gated_step_does_not_ask_again() -> None:
    sim = policy_run({"id": "update", "action": "crm.update", "retry": {"limit": 1, "backoff": "fixed"}})
    sim.reconcile()
    sim.decide_approval("update__approval", "Approved")
    sim.reconcile()
    sim.fail("update", "transient")
    sim.reconcile()
    sim.advance(5)
    sim.reconcile()
    assert len(sim.requested) == 1 and [j.attempt for j in sim.created] == [1, 2]


def test_wait_with_a_duration_persists_its_wake_up_time() -> None:
    sim = Sim(workflow([{"id": "pause", "wait": {"duration": "15m"}}, action("after", "pause")]))
    decision = sim.reconcile()
    assert sim.step("pause").wake_at == T0 + timedelta(minutes=15)
    assert decision.wake_at == sim.status.wake_at == T0 + timedelta(minutes=15)
    assert sim.phase == "Waiting"


def test_wait_completes_at_its_wake_up_time() -> None:
    sim = Sim(workflow([{"id": "pause", "wait": {"duration": "15m"}}, action("after", "pause")]))
    sim.reconcile()
    sim.advance(minutes=14)
    sim.reconcile()
    assert sim.started() == []
    sim.advance(minutes=1)
    sim.reconcile()
    assert sim.phase_of("pause") == "Succeeded" and sim.started() == ["after"]


def test_wait_until_a_time_from_a_binding() -> None:
    spec = workflow([{"id": "pause", "wait": {"until": "${{ params.at }}"}}], params=[{"name": "at"}])
    sim = Sim(spec, params={"at": "2026-12-01T09:00:00+01:00"})
    sim.reconcile()
    assert sim.step("pause").wake_at == T0 + timedelta(hours=24)


def test_wait_until_a_past_time_completes_at_once() -> None:
    sim = Sim(workflow([{"id": "pause", "wait": {"until": "2020-01-01T00:00:00Z"}}, action("after", "pause")]))
    sim.reconcile()
    assert sim.phase_of("pause") == "Succeeded" and sim.started() == ["after"]


def test_wait_until_without_utc_offset_fails_as_validation() -> None:
    sim = Sim(workflow([{"id": "pause", "wait": {"until": "2026-12-01T09:00:00"}}]))
    sim.reconcile()
    assert sim.step("pause").error_class == "validation"
    assert "UTC offset" in (sim.step("pause").message or "")


def test_a_counted_decision_is_mirrored_into_the_approval_status() -> None:
    sim = gated_run()
    sim.decide_approval("review", "Rejected", by="carol", reason="wrong quarter")
    decision = sim.reconcile()
    recorded = [a for a in decision.actions if isinstance(a, RecordApprovalDecision)]
    assert [(r.name, r.phase) for r in recorded] == [(f"{sim.name}-review", "Rejected")]


def test_a_four_eyes_gate_approved_by_the_runs_requester_does_not_count() -> None:
    sim = gated_run()
    sim.decide_approval("review", "Approved", by="alice")
    sim.reconcile()
    review = sim.step("review")
    assert (review.phase, review.reason) == ("Failed", "FourEyes")
    assert "approved by alice, who requested this run" in (review.message or "")
    assert sim.phase_of("create_tasks") != "Running" and "create_tasks" not in sim.started()
    assert CloseApproval(f"{sim.name}-review", "Cancelled") in sim.of_type(CloseApproval)


def test_a_retrys_four_eyes_gate_names_and_refuses_the_earlier_requesters() -> None:
    """carol chose the params; bob retried: neither may approve the retry's gate."""
    sim = Sim(workflow([action("load"), REVIEW, CREATE]), requested_by="bob")
    sim.status.earlier_requesters = ["carol"]
    sim.reconcile()
    sim.finish("load", output={"accounts": []})
    sim.reconcile()
    assert sim.requested[0].earlier_requesters == ("carol",)
    sim.decide_approval("review", "Approved", by="carol")
    sim.reconcile()
    assert (sim.step("review").phase, sim.step("review").reason) == ("Failed", "FourEyes")
    assert "create_tasks" not in sim.started()
