"""Subflows: a step that runs another Workflow of its namespace as a child WorkflowRun.

The names, limits and shapes the API, the engine, validation and the displays share. Pure data: nothing here
reads a Workflow or evaluates an expression.

A child run is created by the operator, owned (controller) by the parent run, requested by the parent's
requester, with `spec.trigger.type: parent` naming the parent run, its uid and step, and the chain of Workflows
above it (so its depth is known without reading its ancestors).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from towline.api.common import FreeObject, ObjectName, StepId, TowlineModel
from towline.api.loops import InstanceId

MAX_SUBFLOW_DEPTH = 5
"""Subflows nested below a top-level run: its child is at depth 1; a subflow step at depth 5 fails."""


class SubflowCall(TowlineModel):
    """Run another Workflow of this namespace as a child run; the step ends with the child's phase."""

    name: ObjectName = Field(
        description="A Workflow of this namespace (subflows never cross namespaces) whose spec.subflow.allowed "
        "is true.",
    )
    params: FreeObject = Field(
        default_factory=dict, max_length=100,
        description="Param name -> value for the child run; any value may be a ${{ CEL }} binding, as in with.",
    )


class SubflowPolicy(TowlineModel):
    """Whether other Workflows of the namespace may run this one as a subflow."""

    allowed: bool = Field(
        default=False,
        description="true: a step of another Workflow of this namespace may run this one as a child run "
        "(workflow: {name: ...}). Unset or false: such a step is refused.",
    )


class ParentRef(TowlineModel):
    """The run and step that started a child run (`spec.trigger.parent` of a run whose trigger type is parent)."""

    run: ObjectName = Field(description="The parent WorkflowRun, in this namespace.")
    uid: str = Field(max_length=128, description="The parent run's metadata.uid (its controller ownerReference).")
    step: InstanceId = Field(description="The parent's subflow step (or loop instance) that started this run.")
    workflow_uid: str | None = Field(
        default=None, max_length=128,
        description="The uid of this run's Workflow as the parent's snapshot recorded it: a Workflow deleted and "
        "created again under its name since is another Workflow, and the child refuses to start.",
    )
    chain: list[Annotated[ObjectName, Field(description="A Workflow's name.")]] = Field(
        min_length=1, max_length=MAX_SUBFLOW_DEPTH,
        description="The Workflows of the runs above this one, the top-level run's first: this run's depth is "
        "its length.",
    )


class SubflowRecord(TowlineModel):
    """A subflow Workflow as the parent run's snapshot recorded it when the run started."""

    uid: str = Field(max_length=128, description="The Workflow's metadata.uid.")
    generation: int = Field(ge=0, description="The Workflow's metadata.generation when the parent run started.")


class ChildRetry(TowlineModel):
    """A retry's subflow step whose child run, in the run retried, ended Failed or Cancelled: the step's new child
    is a retry of that child (its Succeeded steps reused). Recorded by the operator from the retried run's status
    and the child as read from the API server, never from what the retry's creator wrote."""

    run: ObjectName = Field(description="The child run of the run retried, in this namespace.")
    uid: str = Field(max_length=128, description="That child run's metadata.uid (a run created later under its "
                     "name is another run, never retried as it).")
    reuse: list[StepId] = Field(
        default_factory=list, max_length=1000,
        description="That child run's Succeeded steps the new child reuses (as kubectl towline retry picks them).",
    )
    params_digest: str = Field(
        max_length=64, description="SHA-256 of that child run's spec.params (canonical JSON): a new child whose "
        "params differ (a step it binds ran again) starts from the start instead.",
    )


def subflow_chain_text(chain: list[str], last: str) -> str:
    """`a -> b -> c`: the Workflows from the top-level run down to `last`."""
    return " -> ".join([*chain, last])
