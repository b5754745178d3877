"""Operator metrics derived from a run's status transitions (towline.metrics), driven by the real engine."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from engine_harness import Sim, action, workflow
from prometheus_client import REGISTRY

from towline.api.run import WorkflowRunStatus
from towline.metrics import export_operator_state, next_gate_expiry, open_approval_gates, record_run_transition


@dataclass(frozen=True)
class Seen:
    """A run as the operator remembers it (runtime.operator.RunSummary's metric fields)."""

    workflow: str
    phase: str
    open_gates: int = 0
    gate_expiry: float | None = None
    awaiting_archive: bool = False
    name: str = ""
    trigger: str = "manual"
    letter_since: float | None = None
    replays: str | None = None

    @classmethod
    def of(cls, body: dict[str, Any]) -> Seen:
        return cls("renewal-watch", body["status"]["phase"], open_approval_gates(body), next_gate_expiry(body))


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def drive(sim: Sim, namespace: str, steps: list[str]) -> None:
    """Reconcile, finishing the listed steps in order, recording every written transition."""
    for _ in range(20):
        before = sim.status
        sim.reconcile()
        record_run_transition(namespace, "renewal-watch", "manual", before, sim.status)
        if sim.phase in ("Succeeded", "Failed", "Cancelled"):
            return
        active = {step_id for (step_id, _), job in sim.jobs.items() if job.state == "active"}
        if steps and steps[0].lstrip("!") in active:
            sim.advance(2)
            step = steps.pop(0)
            if step.startswith("!"):
                sim.fail(step[1:], "transient")
            else:
                sim.finish(step)
        else:
            sim.advance(1)


def test_runs_steps_retries_and_durations_are_counted_once() -> None:
    ns = "metrics-a"
    sim = Sim(workflow([action("fetch", retry={"limit": 2, "backoff": "fixed", "baseDelaySeconds": 1}),
                        action("push", "fetch")]))
    drive(sim, ns, ["!fetch", "fetch", "push"])
    assert sim.phase == "Succeeded"
    assert value("towline_runs_started_total", namespace=ns, workflow="renewal-watch", trigger="manual") == 1
    assert value("towline_runs_finished_total", namespace=ns, workflow="renewal-watch", outcome="Succeeded") == 1
    # Recording the same (final) transition again counts nothing: nothing changed.
    record_run_transition(ns, "renewal-watch", "manual", sim.status, sim.status)
    assert value("towline_runs_finished_total", namespace=ns, workflow="renewal-watch", outcome="Succeeded") == 1


def test_step_histogram_buckets_hold_each_attempt() -> None:
    before_le_2 = value("towline_step_duration_seconds_bucket", action="http.request", outcome="Succeeded", le="2.5")
    before_count = value("towline_step_duration_seconds_count", action="http.request", outcome="Succeeded")
    before_failed = value("towline_step_duration_seconds_count", action="http.request", outcome="Failed")
    before_retries = value("towline_step_retries_total", error_class="transient")
    sim = Sim(workflow([action("fetch", retry={"limit": 2, "backoff": "fixed", "baseDelaySeconds": 1}),
                        action("push", "fetch")]))
    drive(sim, "metrics-b", ["!fetch", "fetch", "push"])
    assert value("towline_step_retries_total", error_class="transient") == before_retries + 1
    assert value("towline_step_duration_seconds_count", action="http.request", outcome="Failed") == before_failed + 1
    assert value("towline_step_duration_seconds_count", action="http.request", outcome="Succeeded") == before_count + 2
    # Each attempt took 2 s of simulated time: inside the 2.5 s bucket.
    assert value("towline_step_duration_seconds_bucket", action="http.request", outcome="Succeeded",
                 le="2.5") == before_le_2 + 2


def test_approval_decision_latency_and_pending_gauge() -> None:
    sim = Sim(workflow([{"id": "review", "approval": {"approvers": {"users": ["bob"]}}}, action("a", "review")]))
    sim.reconcile()
    running = {"metadata": {"namespace": "metrics-c", "name": "r"}, "status": sim.status.to_wire()}
    export_operator_state(lambda: [("metrics-c", Seen.of(running))], lambda: True)
    assert value("towline_approvals_pending", namespace="metrics-c") == 1
    # The gate expires expiresAfter (default 72 h) after it opened: the gauge carries that moment.
    expires = next(step for step in running["status"]["steps"] if step.get("approvalName"))["expiresAt"]
    assert value("towline_approval_next_expiry_timestamp_seconds", namespace="metrics-c") == datetime.fromisoformat(
        expires.replace("Z", "+00:00")).timestamp()
    before = value("towline_approval_decision_seconds_count", decision="Approved")
    status = sim.status
    sim.advance(120)
    sim.decide_approval("review", "Approved")
    sim.reconcile()
    record_run_transition("metrics-c", "renewal-watch", "manual", status, sim.status)
    assert value("towline_approval_decision_seconds_count", decision="Approved") == before + 1
    finished = {"metadata": {"namespace": "metrics-c"}, "status": sim.status.to_wire()}
    export_operator_state(lambda: [("metrics-c", Seen.of(finished))], lambda: True)
    assert value("towline_approvals_pending", namespace="metrics-c") == 0
    assert REGISTRY.get_sample_value("towline_approval_next_expiry_timestamp_seconds", {"namespace": "metrics-c"}) \
        is None


def test_a_rejected_run_is_finished_but_never_started() -> None:
    ns = "metrics-d"
    failed = WorkflowRunStatus(phase="Failed")
    record_run_transition(ns, "w", "manual", WorkflowRunStatus(), failed)
    assert value("towline_runs_started_total", namespace=ns, workflow="w", trigger="manual") == 0
    assert value("towline_runs_finished_total", namespace=ns, workflow="w", outcome="Failed") == 1


def test_a_finished_run_lands_in_the_run_duration_histogram_by_outcome() -> None:
    ns = "metrics-e"
    started = WorkflowRunStatus(phase="Running", started_at=datetime(2026, 1, 1, 10, 0, tzinfo=UTC))
    finished = started.model_copy(update={"phase": "Failed", "finished_at": datetime(2026, 1, 1, 10, 2, tzinfo=UTC)})
    record_run_transition(ns, "w", "manual", started, finished)
    assert value("towline_run_duration_seconds_count", namespace=ns, workflow="w", outcome="Failed") == 1
    assert value("towline_run_duration_seconds_sum", namespace=ns, workflow="w", outcome="Failed") == 120
    assert value("towline_run_duration_seconds_bucket", namespace=ns, workflow="w", outcome="Failed", le="60.0") == 0
    assert value("towline_run_duration_seconds_bucket", namespace=ns, workflow="w", outcome="Failed", le="300.0") == 1
    # A run refused before it started has no duration to observe.
    record_run_transition(ns, "w", "manual", WorkflowRunStatus(), WorkflowRunStatus(phase="Failed"))
    assert value("towline_run_duration_seconds_count", namespace=ns, workflow="w", outcome="Failed") == 1


def test_runs_by_phase_and_the_leader_gauge_follow_what_the_operator_sees_now() -> None:
    runs = [("metrics-f", Seen("a", "Running")), ("metrics-f", Seen("a", "Running")),
            ("metrics-f", Seen("a", "Succeeded")), ("metrics-g", Seen("b", "AwaitingApproval", 2, 1.5e9)),
            ("metrics-g", Seen("b", "AwaitingApproval", 1, 1.2e9)),
            ("metrics-h", Seen("c", "Succeeded", awaiting_archive=True)),
            ("metrics-h", Seen("c", "Failed", awaiting_archive=True)), ("metrics-h", Seen("c", "Succeeded"))]
    leading = [False]
    export_operator_state(lambda: runs, lambda: leading[0])
    assert value("towline_runs", namespace="metrics-f", workflow="a", phase="Running") == 2
    assert value("towline_runs", namespace="metrics-f", workflow="a", phase="Succeeded") == 1
    assert value("towline_runs", namespace="metrics-g", workflow="b", phase="AwaitingApproval") == 2
    assert value("towline_approvals_pending", namespace="metrics-g") == 3
    assert value("towline_approval_next_expiry_timestamp_seconds", namespace="metrics-g") == 1.2e9
    assert REGISTRY.get_sample_value("towline_leader") == 0
    assert value("towline_runs_awaiting_archive", namespace="metrics-h") == 2
    assert REGISTRY.get_sample_value("towline_runs_awaiting_archive", {"namespace": "metrics-f"}) is None
    # Nothing is counted up or down: the next scrape shows the runs as they are then.
    runs[:] = [("metrics-f", Seen("a", "Succeeded"))]
    leading[0] = True
    assert REGISTRY.get_sample_value("towline_runs", {"namespace": "metrics-f", "workflow": "a",
                                                       "phase": "Running"}) is None
    assert value("towline_runs", namespace="metrics-f", workflow="a", phase="Succeeded") == 1
    assert REGISTRY.get_sample_value("towline_leader") == 1


def test_each_loop_instance_counts_as_an_attempt_of_its_action_and_the_loop_itself_not_at_all() -> None:
    before = value("towline_step_duration_seconds_count", action="data.transform", outcome="Succeeded")
    before_sum = value("towline_step_duration_seconds_sum", action="data.transform", outcome="Succeeded")
    before_decided = value("towline_approval_decision_seconds_count", decision="Approved")
    sim = Sim(workflow([{"id": "deploy", "action": "data.transform", "forEach": {"items": [1, 2, 3], "maxParallel": 3},
                         "with": {"data": {}, "fields": {"n": "1"}}}]))
    drive(sim, "metrics-f", ["deploy[0]", "deploy[1]", "deploy[2]"])
    assert sim.phase == "Succeeded"
    assert value("towline_step_duration_seconds_count", action="data.transform", outcome="Succeeded") == before + 3
    # All three started together and ended 2, 4 and 6 s later: times read from each entry once it was compacted.
    assert value("towline_step_duration_seconds_sum", action="data.transform", outcome="Succeeded") == pytest.approx(
        before_sum + 12), "a float sum: what the worker's earlier tests observed is added in another order"
    assert value("towline_approval_decision_seconds_count", decision="Approved") == before_decided


def test_runs_that_failed_before_their_first_step_are_counted_until_a_run_replays_them() -> None:
    """The run dead letters' gauges (the alert TowlineRunDeadLetters reads them): a letter a replay names leaves
    them; the oldest one's failure time is per namespace and trigger."""
    runs = [
        ("metrics-l", Seen("a", "Failed", name="early-1", letter_since=100.0)),
        ("metrics-l", Seen("a", "Failed", name="hook-1", trigger="webhook", letter_since=50.0)),
        ("metrics-l", Seen("a", "Failed", name="hook-2", trigger="webhook", letter_since=70.0)),
        ("metrics-l", Seen("a", "Failed", name="hook-0", trigger="webhook", letter_since=10.0)),
        ("metrics-l", Seen("a", "Running", name="again", replays="hook-0")),
        ("metrics-l", Seen("a", "Failed", name="late")),  # failed after a step started: no letter
        ("metrics-m", Seen("b", "Failed", name="hook-0", trigger="webhook", letter_since=5.0)),  # not replayed here
    ]
    export_operator_state(lambda: runs, lambda: True)
    assert value("towline_run_dead_letters", namespace="metrics-l", trigger="manual") == 1
    assert value("towline_run_dead_letters", namespace="metrics-l", trigger="webhook") == 2
    assert value("towline_run_dead_letter_oldest_timestamp_seconds", namespace="metrics-l", trigger="webhook") == 50
    assert value("towline_run_dead_letters", namespace="metrics-m", trigger="webhook") == 1
    runs.append(("metrics-m", Seen("b", "Succeeded", name="again", replays="hook-0")))
    assert REGISTRY.get_sample_value("towline_run_dead_letters", {"namespace": "metrics-m", "trigger": "webhook"}) \
        is None
