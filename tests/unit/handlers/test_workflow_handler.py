"""reconcile_workflow through its WorkflowDeps: what a Workflow's status says about it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from handler_fakes import (
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

from towline.engine.queue import RunInLine
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
