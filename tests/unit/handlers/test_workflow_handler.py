"""reconcile_workflow through its ReconcileContext: what a Workflow's status says about it."""

from __future__ import annotations

import asyncio

from handler_fakes import NAMESPACE, TWO_STEPS, WORKFLOW_KIND, MemoryContext, setup, status_of, workflow

from towline.handlers.workflows import reconcile_workflow


def reconcile(context: MemoryContext, name: str) -> None:
    asyncio.run(reconcile_workflow(context, NAMESPACE, name))


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
