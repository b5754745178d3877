"""Reconcile failure reporting (handlers/failures.py) and policy.maxConcurrentRuns (handlers/runs.py gathers, the
engine's admission decides), through their RunDeps against the in-memory API server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from handler_fakes import (
    NAMESPACE,
    TWO_STEPS,
    MemoryContext,
    events,
    finish_job,
    jobs,
    run,
    setup,
    status_of,
    version_of,
    workflow,
)

from towline.engine import RunInLine
from towline.handlers.failures import report_reconcile_failure
from towline.handlers.runs import reconcile_run
from towline.k8s.client import ApiError

REFUSED = ApiError(422, 'Job.batch "towline-step-r1-plan-1" is invalid: spec.template: field is immutable')


def reconcile(context: MemoryContext, name: str) -> None:
    asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, name))


def report(context: MemoryContext, name: str, error: BaseException = REFUSED) -> None:
    asyncio.run(report_reconcile_failure(context.for_runs(), NAMESPACE, name, 5, error))


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in status.get("conditions") or [] if c["type"] == kind]
    assert len(found) == 1, f"{kind}: {found}"
    return found[0]


def test_a_run_the_queue_gave_up_on_says_why_once_and_clears_on_the_next_good_pass(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    reconcile(context, "r1")
    report(context, "r1")
    failing = condition(status_of(context, "r1"), "ReconcileFailing")
    assert (failing["status"], failing["reason"]) == ("True", "RetryBudgetExhausted")
    assert failing["message"].startswith(
        "5 reconcile passes in a row failed; the last with ApiError: 422: Job.batch \"towline-step-r1-plan-1\" is "
        "invalid: spec.template: field is immutable.")
    assert status_of(context, "r1")["phase"] == "Running", "the report changes no phase"
    assert events(context).count(("r1", "Warning", "ReconcileFailing")) == 1

    # The same failure reported again writes nothing and records no second Event.
    version = version_of(context, "r1")
    report(context, "r1")
    assert version_of(context, "r1") == version
    assert events(context).count(("r1", "Warning", "ReconcileFailing")) == 1

    reconcile(context, "r1")
    cleared = condition(status_of(context, "r1"), "ReconcileFailing")
    assert (cleared["status"], cleared["reason"]) == ("False", "Reconciled")


def test_a_finished_run_gets_no_failure_report_and_a_deleted_one_no_error(context: MemoryContext) -> None:
    setup(context, run("r1", "nowhere"))
    reconcile(context, "r1")
    assert status_of(context, "r1")["phase"] == "Failed"
    version = version_of(context, "r1")
    report(context, "r1")
    report(context, "gone")
    assert version_of(context, "r1") == version
    assert [e for e in events(context) if e[2] == "ReconcileFailing"] == []


ONE_AT_A_TIME = {**TWO_STEPS, "steps": TWO_STEPS["steps"][:1], "policy": {"maxConcurrentRuns": 1}}


def test_a_run_over_the_limit_is_held_pending_and_starts_once_a_slot_frees(context: MemoryContext) -> None:
    setup(context, workflow("rel", ONE_AT_A_TIME), run("r-a", "rel"))
    reconcile(context, "r-a")
    assert status_of(context, "r-a")["phase"] == "Running"
    setup(context, run("r-b", "rel"))
    # The watch-fed view is behind (it shows no run): the fresh list from the API server holds r-b anyway.
    reconcile(context, "r-b")
    held = status_of(context, "r-b")
    assert held["phase"] == "Pending"
    queued = condition(held, "Queued")
    assert (queued["status"], queued["reason"]) == ("True", "MaxConcurrentRuns")
    assert "workflowSpec" not in held, "a queued run has no snapshot yet"
    assert jobs(context) == ["towline-step-r-a-plan-1"]
    assert events(context).count(("r-b", "Normal", "RunQueued")) == 1

    asyncio.run(finish_job(context.api, NAMESPACE, "towline-step-r-a-plan-1", {"ok": True, "output": {}}))
    reconcile(context, "r-a")
    assert status_of(context, "r-a")["phase"] == "Succeeded"
    reconcile(context, "r-b")
    started = status_of(context, "r-b")
    assert started["phase"] == "Running"
    assert condition(started, "Queued")["status"] == "False"
    assert jobs(context) == ["towline-step-r-a-plan-1", "towline-step-r-b-plan-1"]


def test_a_run_the_watch_shows_behind_a_running_one_is_held_without_a_list(context: MemoryContext) -> None:
    setup(context, workflow("rel", ONE_AT_A_TIME), run("r-b", "rel"))
    context.in_line = [RunInLine("r-a", datetime(2026, 1, 1, tzinfo=UTC), started=True, finished=False)]
    reconcile(context, "r-b")
    assert condition(status_of(context, "r-b"), "Queued")["status"] == "True"
    assert not [path for method, path in context.api.requests if method == "GET" and path.endswith("/workflowruns")]


def test_a_new_run_waits_while_the_archive_is_that_far_behind_in_its_namespace(context: MemoryContext) -> None:
    context.archive_max_runs_awaiting = 2
    context.awaiting_archive = {NAMESPACE: 2, "elsewhere": 0}
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    reconcile(context, "r1")
    held = status_of(context, "r1")
    assert held["phase"] == "Pending" and "workflowSpec" not in held
    queued = condition(held, "Queued")
    assert (queued["status"], queued["reason"]) == ("True", "ArchiveBehind")
    assert "2 ended run(s)" in queued["message"] and "archive.maxRunsAwaiting is 2" in queued["message"]
    assert jobs(context) == []
    context.awaiting_archive = {NAMESPACE: 1}  # the archive wrote one
    reconcile(context, "r1")
    assert status_of(context, "r1")["phase"] == "Running"
    assert jobs(context) == ["towline-step-r1-plan-1"]


def test_without_a_limit_the_archives_backlog_holds_nothing(context: MemoryContext) -> None:
    context.awaiting_archive = {NAMESPACE: 5000}
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    reconcile(context, "r1")
    assert status_of(context, "r1")["phase"] == "Running"
