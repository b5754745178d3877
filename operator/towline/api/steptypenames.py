"""How an action names a user step type, without the resource models.

Readers that only draw runs (the `kubectl towline` plugin, a new process for every command) need these few
names, not pydantic's models (towline.api.steptype, which takes them from here), as towline.api.runterms does
for a run's phases.
"""

from __future__ import annotations

from typing import Literal

STEP_TYPE_PREFIX = "steptype/"
"""`action: steptype/<name>`: a StepType in the run's namespace."""
CLUSTER_STEP_TYPE_PREFIX = "clustersteptype/"
"""`action: clustersteptype/<name>`: a ClusterStepType."""

StepTypeKind = Literal["StepType", "ClusterStepType"]


def step_type_reference(action: str) -> tuple[StepTypeKind, str] | None:
    """(kind, name) when `action` names a user type, None for a built-in action such as `http.request`."""
    if action.startswith(STEP_TYPE_PREFIX):
        return "StepType", action.removeprefix(STEP_TYPE_PREFIX)
    if action.startswith(CLUSTER_STEP_TYPE_PREFIX):
        return "ClusterStepType", action.removeprefix(CLUSTER_STEP_TYPE_PREFIX)
    return None
