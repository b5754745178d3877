"""reconcile_workflow through its WorkflowDeps: what a Workflow's status says about it."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

from handler_fakes import (
    JSON,
    NAMESPACE,
    RUNS,
    TWO_STEPS,
    WORKFLOW_KIND,
    MemoryContext,
    run,
    setup,
    status_of,
    workflow,
)

from towline.api.workflow import LastRun
from towline.engine.admission import RunInLine
from towline.handlers.context import WorkflowDeps
from towline.handlers.history import FinishedRun
from towline.handlers.workflows import reconcile_workflow


def reconcile(context: MemoryContext, name: str) -> None:
    asyncio.run(reconcile_workflow(context.for_workflows(), NAMESPACE, name))


def test_a_valid_workflow_is_ready_for_its_generation(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS))
    asyncio.run(context.api.merge_patch(f"/apis/towline.dev/v1alpha1/namespaces/{NAMESPACE}/workflows/rel",
                                        {"spec": {"params": [{"name": "version", "type": "string",
                                                                         "default": "2.0.0"}]}}))
    reconcile(context, "rel")
    status = status_of(context, "rel", WORKFLOW_KIND)
    assert status["observedGeneration"] == 2
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["observedGeneration"]) == ("True", 2)
    assert status.get("validationErrors", []) == []
    assert context.woken == [(NAMESPACE, "rel")], "queued runs look again: the limit may have grown"


def test_an_invalid_workflow_is_not_ready_and_lists_its_errors(context: MemoryContext) -> None:
    setup(context, workflow("broken", {"steps": [{"id": "a", "action": "no.such.action"},
                                                 {"id": "b", "action": "data.transform", "needs": ["ghost"]}]}))
    reconcile(context, "broken")
    status = status_of(context, "broken", WORKFLOW_KIND)
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["observedGeneration"]) == ("False", 1)
    fields = [error["field"] for error in status["validationErrors"]]
    assert "spec.steps[0].action" in fields and any(field.startswith("spec.steps[1].needs") for field in fields)
    assert [c["status"] for c in status["conditions"] if c["type"] == "Stalled"] == ["True"]


FORBID = {**TWO_STEPS, "triggers": [{"name": "every_minute",
                                     "schedule": {"cron": "* * * * *", "concurrencyPolicy": "Forbid"}}]}


def test_forbid_reads_the_runs_live_only_when_the_watch_shows_one_in_flight(context: MemoryContext) -> None:
    """The store decides whether a list is needed; the live list decides whether the slot is skipped."""
    setup(context, workflow("rel", FORBID), run("manual-1", "rel"))
    context.clock = datetime.now(UTC).replace(second=30, microsecond=0) + timedelta(minutes=1)
    reconcile(context, "rel")  # the first pass only notes the schedule (no back-fill)
    runs_listed = ("GET", f"/apis/towline.dev/v1alpha1/namespaces/{NAMESPACE}/workflowruns")

    # The watch shows manual-1 in flight: the runs are read live, and the slot is skipped.
    context.in_line = [RunInLine("manual-1", context.clock, started=True, finished=False)]
    context.clock += timedelta(minutes=1)
    reconcile(context, "rel")
    assert runs_listed in context.api.requests
    assert [r["metadata"]["name"] for r in context.api.of_kind(RUNS)] == ["manual-1"], "Forbid skipped the slot"

    # The watch shows it finished: no list, and the slot's run is created.
    context.in_line = [RunInLine("manual-1", context.clock, started=True, finished=True)]
    context.api.requests.clear()
    context.clock += timedelta(minutes=1)
    reconcile(context, "rel")
    assert runs_listed not in context.api.requests
    assert len(context.api.of_kind(RUNS)) == 2


class Runs:
    """A RunLister of just what these tests say the watch shows."""

    def __init__(self, last: LastRun | None = None, finished: list[FinishedRun] | None = None) -> None:
        self.last = last
        self.finished = finished or []

    def in_line(self, namespace: str, workflow: str) -> list[RunInLine]:
        return []

    def awaiting_archive(self, namespace: str) -> int:
        return 0

    def last_run_of(self, namespace: str, workflow: str) -> LastRun | None:
        return self.last

    def finished_runs_of(self, namespace: str, workflow: str) -> list[FinishedRun]:
        return list(self.finished)


def with_runs(context: MemoryContext, runs: Runs) -> WorkflowDeps:
    return dataclasses.replace(context.for_workflows(), runs=runs)


def test_the_last_run_and_the_history_come_from_the_run_lister(context: MemoryContext) -> None:
    keep_one = {**TWO_STEPS, "policy": {"history": {"succeeded": 1, "failed": 1}}}
    setup(context, workflow("rel", keep_one), run("old", "rel"), run("new", "rel"), run("bad", "rel"))
    runs = Runs(last=LastRun(name="new", phase="Succeeded"),
                finished=[FinishedRun("old", "Succeeded", "2026-12-01T09:00:00Z"),
                          FinishedRun("new", "Succeeded", "2026-12-01T09:30:00Z"),
                          FinishedRun("bad", "Failed", "2026-12-01T09:10:00Z")])
    asyncio.run(reconcile_workflow(with_runs(context, runs), NAMESPACE, "rel"))
    assert status_of(context, "rel", WORKFLOW_KIND)["lastRun"] == {"name": "new", "phase": "Succeeded"}
    assert sorted(r["metadata"]["name"] for r in context.api.of_kind(RUNS)) == ["bad", "new"], \
        "the older succeeded run beyond the limit is deleted; the one failed run is kept"
    assert not [r for r in context.api.requests if r == ("GET", f"/apis/towline.dev/v1alpha1/namespaces/{NAMESPACE}"
                                                             "/workflowruns")], "the history is never listed"


EVERY_MINUTE = {**TWO_STEPS, "triggers": [{"name": "every_minute", "schedule": {"cron": "* * * * *"}}]}


def test_a_scheduled_run_is_due_by_the_given_clock_and_created_as_the_given_creator(context: MemoryContext) -> None:
    setup(context, workflow("rel", EVERY_MINUTE))
    # After the Workflow's creation (the API server stamps it with the machine's time): no slot before it counts.
    context.clock = datetime.now(UTC).replace(second=30, microsecond=0) + timedelta(minutes=1)
    reconcile(context, "rel")  # the first pass only notes the schedule (no back-fill)
    assert context.api.of_kind(RUNS) == []
    context.clock += timedelta(minutes=1)
    context.identity_user = "system:serviceaccount:ops:towline"
    reconcile(context, "rel")
    [created] = context.api.of_kind(RUNS)
    assert created["spec"]["requestedBy"] == "system:serviceaccount:ops:towline"
    slot = context.clock.replace(second=0)
    assert created["metadata"]["name"] == f"rel-every-minute-{slot:%Y%m%d%H%M}", "named for the given clock's slot"


def test_a_status_write_that_conflicts_requeues_the_workflow(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS))
    path = f"/apis/towline.dev/v1alpha1/namespaces/{NAMESPACE}/workflows/rel"
    read = context.api.get

    async def stale_read(requested: str) -> JSON | None:
        body = await read(requested)
        if requested == path:  # somebody else writes between the pass's read and its status write
            await context.api.merge_patch(path, {"metadata": {"labels": {"team": "a"}}})
        return body

    context.api.get = stale_read  # type: ignore[method-assign]
    reconcile(context, "rel")
    assert context.requeued_workflows == [(NAMESPACE, "rel")]
    stored = context.api.stored(WORKFLOW_KIND, NAMESPACE, "rel")
    assert stored is not None and "status" not in stored
