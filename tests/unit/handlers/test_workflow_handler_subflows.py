"""reconcile_workflow with subflow steps: judged against the namespace's Workflows, and a changed Workflow has its
callers judged again (once per change)."""

from __future__ import annotations

import asyncio

from handler_fakes import NAMESPACE, WORKFLOW_KIND, MemoryContext, setup, status_of, workflow

from towline.handlers.workflows import reconcile_workflow
from towline.k8s.client import WORKFLOWS

STEP = {"id": "noop", "action": "data.transform", "with": {"data": {}, "fields": {"x": "1"}}}


def reconcile(context: MemoryContext, name: str) -> None:
    asyncio.run(reconcile_workflow(context.for_workflows(), NAMESPACE, name))


def calls(name: str, **extra: object) -> dict[str, object]:
    return {"steps": [{"id": "call", "workflow": {"name": name}}], **extra}


def errors_of(context: MemoryContext, name: str) -> list[tuple[str, str]]:
    status = status_of(context, name, WORKFLOW_KIND)
    return [(e["field"], e["message"]) for e in status.get("validationErrors", [])]


def test_a_call_of_a_workflow_that_does_not_allow_subflows_makes_the_caller_not_ready(
    context: MemoryContext,
) -> None:
    setup(context, workflow("private", {"steps": [STEP]}), workflow("release", calls("private")))
    reconcile(context, "release")
    assert errors_of(context, "release") == [("spec.steps[0].workflow.name", "Workflow 'private' does not allow "
                                              "runs as a subflow: set spec.subflow.allowed: true in it, or call "
                                              "another")]
    status = status_of(context, "release", WORKFLOW_KIND)
    assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["False"]


def test_a_cycle_makes_the_workflow_not_ready_naming_it(context: MemoryContext) -> None:
    setup(context, workflow("a", calls("b", subflow={"allowed": True})),
          workflow("b", calls("a", subflow={"allowed": True})))
    reconcile(context, "b")
    assert errors_of(context, "b") == [("spec.steps[0].workflow.name", "subflows call each other in a cycle: "
                                        "b -> a -> b; a Workflow may not run itself, directly or through others")]


def test_a_changed_workflow_has_its_callers_judged_again_once(context: MemoryContext) -> None:
    setup(context, workflow("shared", {"steps": [STEP], "subflow": {"allowed": True}}),
          workflow("release", calls("shared")), workflow("rollback", calls("shared")))
    reconcile(context, "shared")
    assert sorted(context.requeued_workflows) == [(NAMESPACE, "release"), (NAMESPACE, "rollback")]
    reconcile(context, "shared")  # no change since: nobody is asked again
    assert len(context.requeued_workflows) == 2


def test_a_deleted_workflow_has_its_callers_judged_again_and_made_not_ready_naming_it(
    context: MemoryContext,
) -> None:
    setup(context, workflow("shared", {"steps": [STEP], "subflow": {"allowed": True}}),
          workflow("release", calls("shared")), workflow("unrelated", {"steps": [STEP]}))
    reconcile(context, "release")
    assert errors_of(context, "release") == []
    asyncio.run(context.api.request("DELETE", WORKFLOWS.path(NAMESPACE, "shared")))
    reconcile(context, "shared")  # the pass its deletion queues: it is gone
    assert context.requeued_workflows == [(NAMESPACE, "release")]
    reconcile(context, "release")
    assert errors_of(context, "release") == [("spec.steps[0].workflow.name", "no Workflow 'shared' in this namespace; "
                                              "a subflow runs a Workflow of the same namespace: create it or correct "
                                              "the name")]
    status = status_of(context, "release", WORKFLOW_KIND)
    assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["False"]
