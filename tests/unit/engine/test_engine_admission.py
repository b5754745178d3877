"""policy.maxConcurrentRuns: which run that has not started may start, oldest first, and how it waits; and the
archive's backlog limit (archive.maxRunsAwaiting)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from towline.api.run import WorkflowRunStatus
from towline.engine import (
    ARCHIVE_BEHIND_REASON,
    QUEUED_CONDITION,
    EmitEvent,
    QueueLimits,
    RunInLine,
    admission,
    archive_behind,
    cancel_queued_run,
    held_in_queue,
    hold_run,
    hold_run_for_archive,
    max_concurrent_runs,
    workflow_runs_in_line,
)
from towline.engine.admission import leave_queue

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def line(name: str, second: int, *, started: bool = False, finished: bool = False) -> RunInLine:
    return RunInLine(name, T0 + timedelta(seconds=second), started=started, finished=finished)


def test_a_run_with_no_limit_always_starts() -> None:
    me = line("c", 5)
    assert admission(me, [line("a", 1, started=True), line("b", 2, started=True)], None).may_start


def test_a_run_starts_while_fewer_than_the_limit_are_running() -> None:
    assert admission(line("b", 2), [line("a", 1, started=True)], 2).may_start


def test_a_run_waits_while_the_limit_is_reached() -> None:
    seen = admission(line("c", 3), [line("a", 1, started=True), line("b", 2, started=True)], 2)
    assert not seen.may_start
    assert (seen.running, seen.queued_ahead) == (2, 0)


def test_finished_runs_do_not_count() -> None:
    others = [line("a", 1, started=True, finished=True), line("b", 2, finished=True)]
    assert admission(line("c", 3), others, 1).may_start


def test_an_older_queued_run_goes_first() -> None:
    older, younger = line("a", 1), line("b", 2)
    assert admission(older, [younger], 1).may_start
    seen = admission(younger, [older], 1)
    assert not seen.may_start
    assert (seen.running, seen.queued_ahead) == (0, 1)


def test_younger_queued_runs_do_not_count() -> None:
    assert admission(line("a", 1), [line("b", 2), line("c", 3), line("d", 4)], 1).may_start


def test_a_younger_run_that_started_holds_its_slot() -> None:
    # e.g. the limit was lower when it started, or it started before the older one was created in its second
    seen = admission(line("a", 1), [line("b", 2, started=True)], 1)
    assert not seen.may_start
    assert seen.running == 1


def test_with_a_limit_of_two_the_two_oldest_queued_start() -> None:
    runs = [line(name, second) for second, name in enumerate(["a", "b", "c", "d"])]
    running = [line("x", -5, started=True)]
    starting = [me.name for me in runs if admission(me, [*running, *runs], 3).may_start]
    assert starting == ["a", "b"]


def test_runs_created_in_the_same_second_go_by_name() -> None:
    first, second = line("run-a", 1), line("run-b", 1)
    assert admission(first, [second], 1).may_start
    assert not admission(second, [first], 1).may_start


def test_a_name_that_sorts_first_does_not_jump_the_queue() -> None:
    early, late = line("zzz-created-first", 1), line("aaa-created-later", 2)
    assert admission(early, [late], 1).may_start
    assert not admission(late, [early], 1).may_start


def test_the_run_itself_is_not_counted() -> None:
    me = line("a", 1)
    assert admission(me, [me, line("a", 1, started=True)], 1).may_start


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_at_most_the_limit_start_from_a_full_queue(limit: int) -> None:
    runs = [line(f"run-{index}", index % 3) for index in range(8)]
    started = [me for me in runs if admission(me, runs, limit).may_start]
    assert len(started) == limit
    assert sorted(started, key=lambda r: r.order) == sorted(runs, key=lambda r: r.order)[:limit]


def test_a_held_run_stays_pending_with_the_reason_and_one_event() -> None:
    seen = admission(line("c", 3), [line("a", 1, started=True), line("b", 2)], 1)
    first = hold_run(WorkflowRunStatus(), "nightly", 1, seen, T0)
    assert first.status.phase == "Pending"
    assert first.status.workflow_spec is None and first.status.started_at is None
    assert first.status.message == ("queued: 1 run(s) of workflow nightly running and 1 older run(s) queued, "
                                    "policy.maxConcurrentRuns is 1; starts when one finishes")
    assert first.actions == (EmitEvent("Normal", "RunQueued", first.status.message or ""),)
    again = hold_run(first.status, "nightly", 1, seen, T0 + timedelta(minutes=1))
    assert again.actions == ()
    assert again.status == first.status, "a pass that changes nothing writes nothing"


def test_a_run_cancelled_while_queued_ends_without_starting() -> None:
    seen = admission(line("b", 2), [line("a", 1, started=True)], 1)
    held = hold_run(WorkflowRunStatus(), "nightly", 1, seen, T0).status
    decision = cancel_queued_run(held, T0 + timedelta(seconds=5))
    assert decision.status.phase == "Cancelled"
    assert decision.status.started_at is None and decision.status.workflow_spec is None
    assert decision.status.finished_at == T0 + timedelta(seconds=5)
    assert {(c.type, c.status) for c in decision.status.conditions} == {(QUEUED_CONDITION, "False"),
                                                                       ("Succeeded", "False")}


def test_leaving_the_queue_turns_the_condition_false() -> None:
    seen = admission(line("b", 2), [line("a", 1, started=True)], 1)
    status = hold_run(WorkflowRunStatus(), "nightly", 1, seen, T0).status
    leave_queue(status, T0 + timedelta(minutes=3))
    queued = next(c for c in status.conditions if c.type == QUEUED_CONDITION)
    ended = T0 + timedelta(minutes=3)
    assert (queued.status, queued.reason, queued.last_transition_time) == ("False", "Started", ended)


def test_the_archives_limit_holds_runs_once_that_many_ended_runs_await_it() -> None:
    assert not archive_behind(999, 1000)
    assert archive_behind(1000, 1000)
    assert not archive_behind(5000, 0), "0: no limit"


def test_a_run_held_for_the_archive_says_the_count_the_limit_and_what_to_do() -> None:
    held = hold_run_for_archive(WorkflowRunStatus(), "sales-ops", 2, 2, T0)
    assert held.status.phase == "Pending"
    queued = [c for c in held.status.conditions if c.type == QUEUED_CONDITION]
    assert [(c.status, c.reason) for c in queued] == [("True", ARCHIVE_BEHIND_REASON)]
    message = held.status.message or ""
    assert "2 ended run(s) of namespace sales-ops await the archive" in message
    assert "archive.maxRunsAwaiting is 2" in message and "is the archive running?" in message
    assert [a.reason for a in held.actions if isinstance(a, EmitEvent)] == ["RunQueued"]
    again = hold_run_for_archive(held.status, "sales-ops", 3, 2, T0 + timedelta(seconds=5))
    assert again.actions == (), "the event once"
    started = again.status.model_copy(deep=True)
    leave_queue(started, T0 + timedelta(seconds=9))
    condition = next(c for c in started.conditions if c.type == QUEUED_CONDITION)
    assert (condition.status, condition.reason, condition.message) == (
        "False", "Started", "the archive caught up (archive.maxRunsAwaiting)")


def held(
    run: RunInLine, others: list[RunInLine], limits: QueueLimits, *, cancel: bool = False, stop: bool = False,
) -> WorkflowRunStatus | None:
    decision = held_in_queue(WorkflowRunStatus(), cancel=cancel, stop=stop, namespace="sales-ops", workflow="nightly",
                             run=run, others=others, limits=limits, now=T0)
    return None if decision is None else decision.status


def test_the_archives_backlog_holds_a_run_whatever_the_workflows_limit() -> None:
    behind = QueueLimits(None, max_runs_awaiting=2, awaiting_archive=2)
    status = held(line("a", 1), [], behind)
    assert status is not None and [c.reason for c in status.conditions] == [ARCHIVE_BEHIND_REASON]
    cancelled = held(line("a", 1), [], behind, cancel=True)
    assert cancelled is not None and cancelled.phase == "Cancelled"
    assert not behind.counts_runs, "no list of the workflow's runs is needed without its limit"


def test_a_run_under_both_limits_may_start_and_one_behind_a_running_one_is_held() -> None:
    limits = QueueLimits(1, max_runs_awaiting=2, awaiting_archive=1)
    assert held(line("b", 2), [line("a", 1, started=True, finished=True)], limits) is None
    status = held(line("b", 2), [line("a", 1, started=True)], limits)
    assert status is not None and status.phase == "Pending"
    assert "policy.maxConcurrentRuns is 1" in (status.message or "")
    cancelled = held(line("b", 2), [line("a", 1, started=True)], limits, cancel=True)
    assert cancelled is not None and cancelled.phase == "Cancelled"


@pytest.mark.parametrize(("policy", "limit"), [
    ({"maxConcurrentRuns": 3}, 3), ({}, None), ({"maxConcurrentRuns": 0}, None), ({"maxConcurrentRuns": True}, None),
    ({"maxConcurrentRuns": "2"}, None),
])
def test_the_limit_is_the_workflows_policy_and_anything_but_a_positive_integer_is_none(
    policy: dict[str, object], limit: int | None,
) -> None:
    assert max_concurrent_runs({"spec": {"policy": policy}}) == limit
    assert max_concurrent_runs(None) is None, "a missing Workflow has no limit (its start fails with the reason)"


def test_listed_runs_count_by_their_workflow_and_phase() -> None:
    def run(name: str, workflow: str, phase: str | None) -> dict[str, object]:
        return {"metadata": {"name": name, "creationTimestamp": "2026-12-01T08:00:00Z"},
                "spec": {"workflowRef": {"name": workflow}}, "status": {"phase": phase} if phase else {}}

    listed = [run("a", "nightly", None), run("b", "nightly", "Running"), run("c", "nightly", "Failed"),
              run("d", "hourly", "Running")]
    assert [(r.name, r.started, r.finished) for r in workflow_runs_in_line(listed, "nightly")] == [
        ("a", False, False), ("b", True, False), ("c", True, True)]


def test_a_run_stopped_while_queued_says_it_was_stopped_and_one_cancelled_says_cancelled() -> None:
    limits = QueueLimits(1)
    ahead = [line("a", 1, started=True)]
    stopped = held(line("b", 2), ahead, limits, stop=True)
    assert stopped is not None and stopped.phase == "Cancelled"
    assert stopped.message == "the run was stopped (spec.stop) before it started"
    assert {c.reason for c in stopped.conditions} == {"Stopped"}
    cancelled = held(line("b", 2), ahead, limits, cancel=True, stop=True)
    assert cancelled is not None and cancelled.message == "the run was cancelled (spec.cancel) before it started"
    assert {c.reason for c in cancelled.conditions} == {"Cancelled"}
