"""What `decide` is given about a run (the catalog it may ask is towline.validation.actions.ActionCatalog)."""

from __future__ import annotations

from dataclasses import dataclass

from towline.api.run import WorkflowRunSpec, WorkflowRunStatus


@dataclass(frozen=True)
class RunView:
    """One WorkflowRun as the operator read it; `status.workflow_spec` and `status.params` are set."""

    name: str
    namespace: str
    uid: str
    workflow_name: str
    spec: WorkflowRunSpec
    status: WorkflowRunStatus
    resume_token: str | None = None
    """The value of the run's towline.dev/resume annotation, if any."""

