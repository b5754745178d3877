"""observedGeneration, Reconciling/Stalled and duration: what generic tools read, derived from the run's status."""

from __future__ import annotations

from datetime import timedelta

import pytest
from engine_harness import T0, Sim, action, workflow

from towline.api.approval import APPROVERS_LINE_LIMIT, approvers_line
from towline.api.common import Approvers
from towline.api.run import WorkflowRunStatus
from towline.engine import TERMINAL_RUN_PHASES
from towline.engine.kstatus import kstatus_fields, kstatus_fields_lag, run_duration
from towline.engine.summary import set_condition
from towline.text import elapsed


def conditions(status: WorkflowRunStatus) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in status.conditions}


def test_a_run_in_flight_is_reconciling_with_no_duration_and_the_generation_it_was_decided_from() -> None:
    sim = Sim(workflow([action("a")]))
    sim.reconcile()
    sim.advance(30)
    status = kstatus_fields(sim.status, 3, sim.now)
    assert status.observed_generation == 3
    assert conditions(status)["Reconciling"] == ("True", "Running")
    assert conditions(status)["Stalled"] == ("False", "Running")
    assert conditions(status)["Succeeded"][0] == "Unknown"
    assert status.duration is None  # a figure written now would be stale a second later


def test_a_succeeded_run_is_neither_reconciling_nor_stalled_and_says_how_long_it_took() -> None:
    sim = Sim(workflow([action("a")]))
    sim.reconcile()
    started = sim.status.started_at
    sim.advance(72.4)
    sim.finish("a")
    sim.reconcile()
    assert sim.phase == "Succeeded"
    status = kstatus_fields(sim.status, 1, sim.now + timedelta(hours=1))
    assert conditions(status)["Reconciling"] == ("False", "Succeeded")
    assert conditions(status)["Stalled"] == ("False", "Succeeded")
    assert status.duration == "1m12s"
    assert started is not None and status.finished_at == started + timedelta(seconds=72.4)
    # Dated from the run's end, even when written later (a run an older operator finished).
    assert {c.last_transition_time for c in status.conditions if c.type in {"Reconciling", "Stalled"}} == {
        status.finished_at}


@pytest.mark.parametrize(("cancel", "phase", "reason"), [(False, "Failed", "StepFailed"), (True, "Cancelled",
                                                                                           "Cancelled")])
def test_a_run_that_ended_without_succeeding_is_stalled_with_the_outcome_reason(
    cancel: bool, phase: str, reason: str,
) -> None:
    sim = Sim(workflow([action("a")]))
    sim.reconcile()
    sim.advance(5)
    if cancel:
        sim.set_spec(cancel=True)
    else:
        sim.fail("a")
    for _ in range(5):
        sim.reconcile()
    assert sim.phase == phase
    succeeded = next(c for c in sim.status.conditions if c.type == "Succeeded")
    assert (succeeded.status, succeeded.reason) == ("False", reason)
    status = kstatus_fields(sim.status, 2, sim.now)
    assert conditions(status)["Stalled"] == ("True", reason)
    assert conditions(status)["Reconciling"] == ("False", phase)
    assert next(c for c in status.conditions if c.type == "Stalled").message == sim.status.message


def test_a_run_the_operator_gave_up_on_is_stalled_until_a_pass_succeeds_again() -> None:
    sim = Sim(workflow([action("a")]))
    sim.reconcile()
    status = sim.status.model_copy(deep=True)
    set_condition(status, "ReconcileFailing", "True", reason="RetryBudgetExhausted", message="5 passes failed",
                  now=T0)
    stalled = kstatus_fields(status, 1, T0)
    assert conditions(stalled)["Stalled"] == ("True", "ReconcileFailing")
    assert conditions(stalled)["Reconciling"][0] == "False"
    set_condition(stalled, "ReconcileFailing", "False", reason="Reconciled", message="ok", now=T0)
    again = kstatus_fields(stalled, 1, T0)
    assert conditions(again)["Stalled"][0] == "False"
    assert conditions(again)["Reconciling"][0] == "True"


@pytest.mark.parametrize("phase", ["Pending", "Running", "Waiting", "AwaitingApproval", "RetryScheduled",
                                   "Succeeded", "Failed", "Cancelled"])
def test_never_both_reconciling_and_stalled_and_a_second_derivation_changes_nothing(phase: str) -> None:
    status = WorkflowRunStatus(phase=phase, started_at=T0,
                               finished_at=T0 + timedelta(seconds=3) if phase in TERMINAL_RUN_PHASES else None)
    once = kstatus_fields(status, 4, T0)
    true = {c.type for c in once.conditions if c.status == "True"}
    assert len(true & {"Reconciling", "Stalled"}) == 1 or (phase == "Succeeded" and not true)
    assert kstatus_fields(once, 4, T0 + timedelta(minutes=5)) == once  # a finished run is written once
    assert status.conditions == []  # the input is not changed


def test_a_run_that_never_started_has_no_duration() -> None:
    status = WorkflowRunStatus(phase="Failed", finished_at=T0)
    assert run_duration(status) is None
    assert kstatus_fields(status, 1, T0).duration is None


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0.0s"), (0.4, "0.4s"), (59.94, "59.9s"), (60, "1m00s"), (72.4, "1m12s"), (3599, "59m59s"),
    (3600, "1h00m"), (26 * 3600 + 3 * 60 + 9, "26h03m"), (-1, "0.0s"),
])
def test_elapsed_reads_as_the_plugin_tables_do(seconds: float, text: str) -> None:
    assert elapsed(seconds) == text


def test_approvers_line_names_users_then_groups_and_says_nobody_when_none() -> None:
    assert approvers_line(Approvers(users=["alice", "bob"], groups=["sre"])) == "alice, bob, group:sre"
    assert approvers_line(Approvers(groups=["account-managers"])) == "group:account-managers"
    assert approvers_line(Approvers()) == "nobody"
    long = approvers_line(Approvers(users=[f"user-{i:03d}-" + "x" * 200 for i in range(50)]))
    assert len(long) == APPROVERS_LINE_LIMIT and long.endswith("…")


def test_a_finished_run_gets_one_pass_only_while_its_stored_status_lags() -> None:
    """The watch queues finished runs only for this: a late spec change, or a run an older operator finished."""
    finished = kstatus_fields(WorkflowRunStatus(phase="Succeeded", started_at=T0, finished_at=T0), 2, T0)
    wire = finished.to_wire()
    assert not kstatus_fields_lag(wire, 2)
    assert kstatus_fields_lag(wire, 3), "spec.cancel set after the end raised the generation"
    older = {key: value for key, value in wire.items() if key != "observedGeneration"}
    assert kstatus_fields_lag(older, 2)
    assert kstatus_fields_lag({**wire, "conditions": [c for c in wire["conditions"] if c["type"] != "Stalled"]}, 2)
