"""A WorkflowRun's phases, its Approvals' decisions and phases, and the annotation a person sets on a run, without
the resource models.

Clients that only read runs (the `kubectl towline` plugin, whose every command is a new
process) need these few names, not pydantic's models of the three resources: loading those
(and the engine) was a third of the plugin's start. The models (`towline.api.run`) and the
engine's transition table (`towline.engine.phases`) take them from here.
"""

from __future__ import annotations

from typing import Literal, get_args

RunPhase = Literal[
    "Pending", "Running", "Waiting", "AwaitingApproval", "RetryScheduled",
    "Succeeded", "Failed", "Cancelled",
]

StepPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Skipped", "Retrying", "Cancelled"]

TERMINAL_RUN_PHASES: frozenset[RunPhase] = frozenset({"Succeeded", "Failed", "Cancelled"})
"""Phases a run never leaves (the engine's transition table allows no move out of them)."""

ApprovalDecision = Literal["Approved", "Rejected"]
"""What a person decides on an Approval (spec.decision); its phase then says the same."""
DECISIONS: tuple[ApprovalDecision, ...] = get_args(ApprovalDecision)
Closing = Literal["Expired", "Cancelled"]
"""How the operator closes an Approval nobody decided: its time ran out, or the run gave the gate up."""
ApprovalPhase = Literal["Pending", ApprovalDecision, Closing]
ENDED_APPROVAL_PHASES: frozenset[ApprovalPhase] = frozenset((*DECISIONS, *get_args(Closing)))
"""Phases an Approval never leaves: decided, or closed with no decision."""

RESUME_ANNOTATION = "towline.dev/resume"
"""A person sets (or changes) this annotation on a run to resume it after repairing credentials."""
TRACEPARENT_ANNOTATION = "towline.dev/traceparent"
"""A W3C traceparent the run's trace continues (the webhook ingress sets it to its delivery's span); set only when
the run is created, and it only ever says which trace the run's spans join (docs/runtime.md, "Traces")."""
