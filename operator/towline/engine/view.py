"""What `decide` is given about a run, and what it may ask about connector actions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from towline.api.run import WorkflowRunSpec, WorkflowRunStatus
from towline.api.workflow import RetryPolicy


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


class ActionCatalog(Protocol):
    """What the engine needs to know about connector actions; injected by the operator."""

    def is_mutating(self, action: str, inputs: Mapping[str, Any]) -> bool:
        """Whether running `action` with these inputs changes something outside the cluster."""
        ...

    def default_retry(self, action: str) -> RetryPolicy | None:
        """The retry policy of an action whose step sets none; None means no retries."""
        ...

    def is_code(self, action: str) -> bool:
        """Whether `action` runs the workflow author's own code (code.python, code.wasm)."""
        ...

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        """Hosts the action connects to as its inputs are written; None for one known only at run time."""
        ...
