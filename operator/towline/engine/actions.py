"""What the engine wants done, as plain values the operator carries out idempotently.

Actions carry credential aliases and Secret names, never credential values.
Event messages carry ids, error classes and error messages, never step outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from towline.api.common import Approvers
from towline.api.resources import PodMetadata, StepResources
from towline.api.run import RetryOf, WorkflowRunStatus
from towline.api.runterms import ApprovalDecision, Closing
from towline.api.steptype import ResolvedStepType
from towline.api.workflow import ApprovalEvent


@dataclass(frozen=True)
class CreateStepJob:
    """Create the Job (and its egress policy) for one step attempt; a 409 means adopt it."""

    step_id: str
    attempt: int
    job_name: str
    action: str
    inputs: Mapping[str, Any]
    credentials: Mapping[str, str]
    """Credential alias -> name of the Secret mounted for this step."""
    egress: tuple[Mapping[str, Any], ...]
    """The step's `egress` entries in wire form: {"cidr": ..., "ports": [...]}."""
    allow_private_networks: tuple[str, ...]
    allow_hosts: tuple[str, ...]
    """The only hosts the pod may connect to, fixed in the Workflow; empty means any public host."""
    timeout_seconds: int | None
    idempotency_key: str
    mutating: bool
    step_type: ResolvedStepType | None = None
    """The user type the step runs, as the run resolved it when it started; None for a built-in action."""
    resources: StepResources | None = None
    """The step's own requests and limits, over the step type's and the chart's."""
    pod_metadata: PodMetadata | None = None
    """The step's own labels and annotations for its pod, over the chart's and under Towline's."""


@dataclass(frozen=True)
class CreateNotificationJob:
    """Create the Job (and its egress policy) that announces one approval gate event; a 409 means adopt it."""

    step_id: str
    """The gate's step id."""
    event: ApprovalEvent
    index: int
    """Which spec.approvalNotifications entry it comes from."""
    job_name: str
    action: str
    inputs: Mapping[str, Any]
    credentials: Mapping[str, str]
    """Credential alias -> name of the Secret mounted for this notification only."""
    allow_hosts: tuple[str, ...]
    idempotency_key: str


@dataclass(frozen=True)
class CreateApproval:
    """Open an approval gate: create the Approval object a person decides on."""

    step_id: str
    name: str
    message: str
    preview: Mapping[str, Any]
    """What the gated step(s) will do: action, rendered inputs, credential aliases and Secret names."""
    approvers: Approvers
    four_eyes: bool
    requested_by: str | None
    expires_at: datetime
    earlier_requesters: tuple[str, ...] = ()
    """A retry's earlier requesters (status.earlierRequesters): four-eyes refuses them as it does `requested_by`."""
    message_from_inputs: bool = False
    """The message template binds values from the run, so part of it was chosen by whoever started the run."""


@dataclass(frozen=True)
class CloseApproval:
    """Close an undecided Approval, so nobody approves a request the run gave up on.

    `Expired`: the gate's time ran out. `Cancelled`: the run was cancelled or hit its deadline.
    """

    name: str
    phase: Closing


@dataclass(frozen=True)
class RecordApprovalDecision:
    """Mirror a counted decision into the Approval's status (phase and time), for `kubectl get`."""

    name: str
    phase: ApprovalDecision
    decided_at: datetime


@dataclass(frozen=True)
class DeleteJob:
    """Delete a step attempt's Job (and its pod): cancel or run deadline."""

    job_name: str


@dataclass(frozen=True)
class CreateChildRun:
    """Start a subflow step's child WorkflowRun, owned by the run; a 409 is adopted only if it is that child."""

    step_id: str
    name: str
    workflow: str
    params: Mapping[str, Any]
    requested_by: str | None
    workflow_uid: str | None
    chain: tuple[str, ...]
    """The Workflows of the runs above the child, the top-level run's first."""
    suspend: bool = False
    retry_of: RetryOf | None = None
    """A retried parent's: the child is a retry of the earlier child (its spec.retryOf)."""


@dataclass(frozen=True)
class SetChildRun:
    """Carry the run's cancel, stop or suspend switch to a subflow step's child run (a merge patch of its spec)."""

    name: str
    cancel: bool | None = None
    suspend: bool | None = None
    stop: bool | None = None


EventType = Literal["Normal", "Warning"]
"""A Kubernetes Event's type: Normal, or Warning for what a person should look at."""


@dataclass(frozen=True)
class EmitEvent:
    """A Kubernetes Event on the run for something a person cares about."""

    type: EventType
    reason: str
    message: str


Action = (
    CreateStepJob | CreateNotificationJob | CreateApproval | CloseApproval | RecordApprovalDecision | DeleteJob
    | CreateChildRun | SetChildRun | EmitEvent
)


@dataclass(frozen=True)
class Decision:
    """The new status to write once, the actions to carry out before writing it, and when to look again."""

    status: WorkflowRunStatus
    actions: tuple[Action, ...]
    wake_at: datetime | None
