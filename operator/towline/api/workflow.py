"""The Workflow resource: what a team commits to git.

The operator reads a Workflow and writes only its status: never its spec,
labels or annotations, so a GitOps-synced manifest never drifts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from towline.api.common import (
    Approvers,
    Condition,
    Duration,
    Identifier,
    ObjectName,
    SecretKeyRef,
    TowlineModel,
)

ErrorClass = Literal[
    "validation", "auth", "rate_limit", "transient", "permanent", "unknown_side_effect",
    "output_too_large", "timeout",
]
"""How a failed step attempt is classified; retries, pauses and replays key off it."""

RETRYABLE_BY_DEFAULT: tuple[ErrorClass, ...] = ("transient", "rate_limit", "timeout")

ParamType = Literal["string", "integer", "number", "boolean", "object", "array"]


class Param(TowlineModel):
    """A declared input of the workflow; runs supply a value or take the default."""

    name: Identifier
    type: ParamType = "string"
    default: Any = Field(default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    description: str = Field(default="", max_length=1024)
    required: bool = False


class RetryPolicy(TowlineModel):
    """How often and how patiently a failed attempt is tried again."""

    limit: int = Field(default=0, ge=0, le=50, description="Extra attempts after the first.")
    backoff: Literal["exponential", "fixed"] = "exponential"
    base_delay_seconds: float = Field(default=5.0, ge=0, le=86400)
    max_delay_seconds: float = Field(default=300.0, ge=0, le=86400)
    retry_on: list[ErrorClass] = Field(default_factory=lambda: list(RETRYABLE_BY_DEFAULT), max_length=8)


class EgressRule(TowlineModel):
    """One destination a step's pod may reach, besides DNS and its connector's own."""

    cidr: str = Field(max_length=64, description="An IPv4 or IPv6 CIDR, e.g. 203.0.113.0/24")
    ports: list[int] = Field(default_factory=list, max_length=32)


class ApprovalGate(TowlineModel):
    """A human decision the run waits for; recorded on an Approval object."""

    message: str = Field(default="", max_length=4096)
    approvers: Approvers = Field(default_factory=Approvers)
    four_eyes: bool = Field(default=False, description="The person who started the run may not approve it.")
    expires_after: Duration = "24h"


class WaitSpec(TowlineModel):
    """Pause the run for a duration or until a time (RFC 3339, may be a `${{ }}` binding)."""

    duration: Duration | None = None
    until: str | None = Field(default=None, max_length=1024)


class Step(TowlineModel):
    """One node of the DAG: exactly one of `action`, `approval` or `wait`."""

    id: Identifier
    action: str | None = Field(default=None, max_length=128, pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
    with_: dict[str, Any] = Field(
        default_factory=dict, alias="with",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    approval: ApprovalGate | None = None
    wait: WaitSpec | None = None
    needs: list[Identifier] = Field(default_factory=list, max_length=100)
    when: str | None = Field(default=None, max_length=4096, description="A CEL condition; false skips the step.")
    run_if_skipped: bool = Field(
        default=False, description="Run even when a step this one needs was skipped."
    )
    retry: RetryPolicy | None = None
    timeout_seconds: int | None = Field(default=None, ge=1, le=86400 * 7)
    on_failure: str = Field(
        default="fail", max_length=63,
        description="fail, continue, or the id of a step under spec.compensations to run before failing.",
    )
    credentials: dict[str, ObjectName] = Field(
        default_factory=dict, max_length=16,
        description="Credential alias -> name of a Secret in this namespace; mounted for this step only.",
    )
    egress: list[EgressRule] = Field(default_factory=list, max_length=32)
    allow_private_networks: list[str] = Field(
        default_factory=list, max_length=16,
        description="CIDRs of private ranges this step may reach (SSRF guard opt-in).",
    )

    @property
    def kind(self) -> Literal["action", "approval", "wait"]:
        if self.approval is not None:
            return "approval"
        if self.wait is not None:
            return "wait"
        return "action"


ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]


class ScheduleTrigger(TowlineModel):
    cron: str = Field(max_length=256)
    time_zone: str = Field(default="UTC", max_length=64)
    concurrency_policy: ConcurrencyPolicy = "Allow"
    starting_deadline_seconds: int | None = Field(default=None, ge=1)


class WebhookVerification(TowlineModel):
    scheme: Literal["github", "standard-webhooks", "hmac", "none"]
    secret_ref: SecretKeyRef | None = None
    public_key_ref: SecretKeyRef | None = None
    tolerance_seconds: int = Field(default=300, ge=1, le=3600)
    allow_unsigned: bool = Field(default=False, description="Required to accept scheme none.")


class WebhookTrigger(TowlineModel):
    verify: WebhookVerification
    max_body_bytes: int = Field(default=1_048_576, ge=1, le=10_485_760)
    rate_limit_per_minute: int = Field(default=60, ge=1, le=100_000)


class Trigger(TowlineModel):
    """A named way runs start: exactly one of `schedule` or `webhook` (manual is always allowed)."""

    name: Identifier
    schedule: ScheduleTrigger | None = None
    webhook: WebhookTrigger | None = None
    params: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )


class HistoryLimits(TowlineModel):
    succeeded: int = Field(default=10, ge=0, le=1000)
    failed: int = Field(default=10, ge=0, le=1000)


class ApprovalPolicy(TowlineModel):
    """Approval gates the policy inserts before mutating actions the author left ungated."""

    require_for_mutating_actions: bool = False
    approvers: Approvers = Field(default_factory=Approvers)
    four_eyes: bool = False
    expires_after: Duration = "24h"


class Policy(TowlineModel):
    max_concurrent_runs: int | None = Field(default=None, ge=1, le=1000)
    parallelism: int = Field(default=10, ge=1, le=1000, description="Steps of one run running at once.")
    run_timeout_seconds: int | None = Field(default=None, ge=1)
    history: HistoryLimits = Field(default_factory=HistoryLimits)
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)


class WorkflowSpec(TowlineModel):
    params: list[Param] = Field(default_factory=list, max_length=100)
    triggers: list[Trigger] = Field(default_factory=list, max_length=20)
    steps: list[Step] = Field(min_length=1, max_length=1000)
    finally_: list[Step] = Field(default_factory=list, alias="finally", max_length=50)
    compensations: list[Step] = Field(default_factory=list, max_length=50)
    policy: Policy = Field(default_factory=Policy)
    suspend: bool = False


class ValidationError(TowlineModel):
    """One problem the operator found that the API server could not: where, and how to fix it."""

    field: str = Field(max_length=512)
    message: str = Field(max_length=2048)


class ScheduleStatus(TowlineModel):
    trigger: Identifier
    next_schedule_time: datetime | None = None
    last_schedule_time: datetime | None = None


class LastRun(TowlineModel):
    name: ObjectName
    phase: str = Field(max_length=32)
    started_at: datetime | None = None


class WorkflowStatus(TowlineModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    validation_errors: list[ValidationError] = Field(default_factory=list, max_length=100)
    schedules: list[ScheduleStatus] = Field(default_factory=list)
    next_schedule_time: datetime | None = None
    last_schedule_time: datetime | None = None
    last_run: LastRun | None = None


class Workflow(TowlineModel):
    api_version: Literal["towline.dev/v1alpha1"] = "towline.dev/v1alpha1"
    kind: Literal["Workflow"] = "Workflow"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: WorkflowSpec
    status: WorkflowStatus | None = None
