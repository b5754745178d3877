"""The Argo CD health checks for Workflow, WorkflowRun and Approval, run as Lua 5.1.

The objects are validated against Towline's own models first, so they have the
shape the API server serves.
"""

from __future__ import annotations

from typing import Any

import yaml
from tests.gitops_health import DOCS, argocd_health, health_script

from towline.api.approval import Approval
from towline.api.run import WorkflowRun
from towline.api.workflow import Workflow

STEPS = [{"id": "check", "action": "http.request", "with": {"url": "https://status.example.com"}}]


def workflow(conditions: list[dict[str, Any]] | None, generation: int = 2, observed: int = 2, **spec: Any) -> Any:
    obj = {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
           "metadata": {"name": "w", "namespace": "team", "generation": generation},
           "spec": {"steps": STEPS, **spec}}
    if conditions is not None:
        obj["status"] = {"observedGeneration": observed, "conditions": conditions}
    Workflow.model_validate(obj)
    return obj


def ready(status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message,
            "observedGeneration": 2, "lastTransitionTime": "2026-11-30T08:00:00Z"}


def run(phase: str, **status: Any) -> Any:
    obj = {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
           "metadata": {"name": "w-1", "namespace": "team"},
           "spec": {"workflowRef": {"name": "w"}, "requestedBy": "carol"},
           "status": {"phase": phase, **status}}
    WorkflowRun.model_validate(obj)
    return obj


def approval(phase: str, **spec: Any) -> Any:
    obj = {"apiVersion": "towline.dev/v1alpha1", "kind": "Approval",
           "metadata": {"name": "w-1-review", "namespace": "team"},
           "spec": {"runName": "w-1", "workflowName": "w", "step": "review", "approvers": {"users": ["bob"]},
                    "expiresAt": "2026-12-01T08:00:00Z", **spec},
           "status": {"phase": phase}}
    Approval.model_validate(obj)
    return obj


def test_ready_workflow_is_healthy() -> None:
    assert argocd_health("Workflow", workflow([ready("True", "Valid", "2 steps")])) == {
        "status": "Healthy", "message": "2 steps"}


def test_invalid_workflow_is_degraded_with_the_operators_message() -> None:
    verdict = argocd_health("Workflow", workflow([ready("False", "Invalid", "steps[0].needs: unknown step x")]))
    assert verdict == {"status": "Degraded", "message": "steps[0].needs: unknown step x"}


def test_workflow_not_yet_seen_for_its_generation_is_progressing() -> None:
    assert argocd_health("Workflow", workflow(None))["status"] == "Progressing"
    stale = workflow([ready("True", "Valid", "ok")], generation=3, observed=2)
    assert argocd_health("Workflow", stale)["status"] == "Progressing"


def test_suspended_workflow_is_suspended() -> None:
    assert argocd_health("Workflow", workflow([ready("True", "Valid", "ok")], suspend=True))["status"] == "Suspended"


def test_running_run_is_progressing() -> None:
    assert argocd_health("WorkflowRun", run("Running", currentStep="check")) == {
        "status": "Progressing", "message": "Running"}


def test_failed_run_is_degraded_with_its_message() -> None:
    verdict = argocd_health("WorkflowRun", run("Failed", message="step check failed: permanent"))
    assert verdict == {"status": "Degraded", "message": "step check failed: permanent"}


def test_succeeded_run_is_healthy() -> None:
    assert argocd_health("WorkflowRun", run("Succeeded"))["status"] == "Healthy"


def test_run_awaiting_approval_is_suspended_and_names_the_step() -> None:
    assert argocd_health("WorkflowRun", run("AwaitingApproval", currentStep="review")) == {
        "status": "Suspended", "message": "Waiting for an approval (review)"}


def test_open_approval_is_suspended_decided_is_healthy_rejected_is_degraded() -> None:
    assert argocd_health("Approval", approval("Pending"))["status"] == "Suspended"
    assert argocd_health("Approval", approval("Approved", decision="Approved", decidedBy="bob")) == {
        "status": "Healthy", "message": "Approved by bob"}
    rejected = approval("Rejected", decision="Rejected", decidedBy="bob", reason="freeze")
    assert argocd_health("Approval", rejected) == {"status": "Degraded", "message": "Rejected by bob: freeze"}
    assert argocd_health("Approval", approval("Expired"))["status"] == "Degraded"


def test_the_argocd_config_snippet_carries_exactly_these_scripts() -> None:
    config = yaml.safe_load((DOCS / "argocd-cm.yaml").read_text())
    for kind in ("Workflow", "WorkflowRun", "Approval"):
        assert config["data"][f"resource.customizations.health.towline.dev_{kind}"] == health_script(kind)
