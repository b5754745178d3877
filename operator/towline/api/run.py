"""The WorkflowRun resource: one execution, and its auditable history in status.

Like Tekton's `status.pipelineSpec`, the run's status keeps a snapshot of the
workflow it executes (`status.workflowSpec`), taken once, so an edit of the
Workflow never changes a run in flight. Credential values never appear here:
only the names of the Secrets a step used.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, WithJsonSchema, model_serializer
from pydantic.alias_generators import to_camel

from towline.api.common import (
    MAX_EARLIER_REQUESTERS,
    Conditions,
    FreeObject,
    ObjectName,
    StepId,
    TowlineModel,
    TowlineResource,
    UserName,
    cel_rule,
    cel_rules,
    immutable,
    list_map,
    stays_on,
)
from towline.api.loops import InstanceId, LoopStatus
from towline.api.runterms import RunPhase, StepPhase
from towline.api.steptype import ResolvedStepType
from towline.api.subflows import ChildRetry, ParentRef, SubflowRecord
from towline.api.workflow import ApprovalEvent, ApprovalNotification, ErrorClass, Policy, Step

TriggerType = Literal["manual", "schedule", "webhook", "parent"]

MAX_INPUT_BYTES = 64 * 1024
"""Largest `spec.params` or `spec.trigger.data`, as compact JSON: inputs, not payloads to carry around."""
MAX_INPUT_DEPTH = 32
"""Deepest nesting of objects and lists in `spec.params` or `spec.trigger.data` (a value at the top is depth 1)."""
MAX_SPEC_DEPTH = 64
"""Deepest nesting of any Towline object's spec; far below where a JSON parser gives up (about 1,000)."""
MAX_INPUT_ITEMS = 256
"""Most entries of any one object or list inside `spec.params` or `spec.trigger.data`.

The API server's CEL walks a list in time that grows with the square of its length (measured: a
flat list of 32,768 numbers took 4.7 s to admit, 128 lists of 256 took 0.23 s), so long lists are
refused where they are cheap to count."""
MAX_SPEC_ITEMS = 1000
"""Most entries of any one object or list in a spec (a Workflow holds up to 1,000 steps)."""


def bounded_nesting_rule(value: str, depth: int, items: int) -> str:
    """CEL that holds when `value` nests objects and lists at most `depth` levels deep, none longer than `items`.

    CEL has no recursion, so the check is unrolled one comprehension per level; each
    level names its element once, so the expression grows linearly with `depth`. The
    chart's admission policy carries it (a unit test keeps the two equal).
    """
    def container(name: str) -> str:
        return f"(type({name}) == map || type({name}) == list)"

    def children(name: str) -> str:
        return f"(type({name}) == map ? {name}.map(k, {name}[k]) : (type({name}) == list ? {name} : []))"

    expression = f"!{container(f'v{depth}')}"
    for level in range(depth, 0, -1):
        name = value if level == 1 else f"v{level - 1}"
        expression = (f"(!{container(name)} || size({name}) <= {items}) && "
                      f"{children(name)}.all(v{level}, {expression})")
    return expression


class WorkflowRef(TowlineModel):
    """The Workflow this run executes."""

    name: ObjectName = Field(description="A Workflow in the run's namespace.")


class TriggerInfo(TowlineModel):
    """What started the run; readable from CEL as `trigger`."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel_rule(
                "(has(self.type) && self.type == 'parent') == has(self.parent)",
                "parent is set exactly on a run of trigger type parent (a subflow's child run, created by the "
                "operator)",
                field_path=".parent",
            ),
        )
    )

    type: TriggerType = Field(
        default="manual", description="manual, schedule, webhook, or parent (a subflow step's child run).",
    )
    name: str | None = Field(default=None, max_length=63, description="The trigger's name in the Workflow.")
    scheduled_time: datetime | None = Field(default=None, description="A scheduled run's slot.")
    delivery_id: str | None = Field(
        default=None, max_length=256, description="A webhook run's delivery id (redeliveries carry the same).",
    )
    data: FreeObject = Field(
        default_factory=dict, max_length=256,
        description="The trigger's payload (a webhook's parsed body), readable as trigger.data.",
    )
    parent: ParentRef | None = Field(
        default=None, description="A child run's parent run and step (trigger type parent only).",
    )


_NEW_RUN = "create a new WorkflowRun instead"


class RetryOf(TowlineModel):
    """Start again from a finished run's failed steps, reusing the outputs of the ones listed.

    The operator copies those outputs from the finished run's status; nothing here carries one.
    """

    run: ObjectName = Field(description="A finished run of the same workflow in this namespace.")
    reuse: list[StepId] = Field(
        default_factory=list, max_length=1000, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Ids of that run's Succeeded steps whose outputs this run reuses instead of running them.",
    )
    workflow_changed: bool = Field(
        default=False,
        description="Run the Workflow as it is now (a new snapshot, e.g. after a fix in git) instead of the finished "
        "run's copy; refused, naming them, when a reused step differs in it (definition or needs). "
        "(kubectl towline retry --workflow-changed)",
    )


class WorkflowRunSpec(TowlineModel):
    """What to run. Immutable after creation, except the `cancel`, `stop` and `suspend` switches."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            immutable("workflowRef", _NEW_RUN),
            immutable("params", _NEW_RUN),
            immutable("trigger", _NEW_RUN),
            immutable("requestedBy", _NEW_RUN),
            immutable("retryOf", _NEW_RUN),
            stays_on("cancel", "a cancelled run stays cancelled; create a new WorkflowRun to run again"),
            stays_on("stop", "a stopped run stays stopped; create a new WorkflowRun to run again"),
        )
    )

    workflow_ref: WorkflowRef = Field(description="The Workflow to run, in this namespace.")
    params: FreeObject = Field(
        default_factory=dict, max_length=100,
        description="Values for the workflow's declared params, readable as params.<name>.",
    )
    trigger: TriggerInfo = Field(
        default_factory=TriggerInfo, description="What started the run; a run created by hand is manual.",
    )
    requested_by: str | None = Field(
        default=None, max_length=253,
        description="Who asked for the run; checked against the request's user by admission policy.",
    )
    retry_of: RetryOf | None = Field(
        default=None, description="Makes this run a retry of a finished run (`kubectl towline retry`).",
    )
    cancel: bool = Field(default=False, description="Set true to cancel the run; it cannot be undone.")
    stop: bool = Field(
        default=False,
        description="Set true to end the run at once without its finally steps or compensations (argo terminate): "
        "running Jobs are deleted, open Approvals closed; it cannot be undone. cancel runs finally steps.",
    )
    suspend: bool = Field(default=False, description="While true, no new step starts; running steps finish.")


class WorkflowSnapshot(TowlineModel):
    """The parts of a Workflow a run executes, copied once when the run starts."""

    generation: int = Field(ge=0, description="The Workflow's metadata.generation that was copied.")
    uid: str | None = Field(
        default=None, max_length=128,
        description="The Workflow's metadata.uid: a Workflow deleted and created again under its name is another "
        "Workflow, whose generation starts over, so a retry checks both.",
    )
    steps: list[Step] = Field(max_length=1000, description="The Workflow's spec.steps.")
    finally_: list[Step] = Field(default_factory=list, alias="finally", description="The Workflow's spec.finally.")
    compensations: list[Step] = Field(default_factory=list, description="The Workflow's spec.compensations.")
    policy: Policy = Field(default_factory=Policy, description="The Workflow's spec.policy.")
    approval_notifications: list[ApprovalNotification] | None = Field(
        default=None, max_length=10,
        description="The Workflow's spec.approvalNotifications; absent when it declares none (so the snapshot of a "
        "run started before notifications existed is written back unchanged).",
    )
    outputs: dict[str, str] | None = Field(
        default=None, description="The Workflow's spec.outputs; absent when it declares none.",
    )
    subflows: dict[str, SubflowRecord] | None = Field(
        default=None, max_length=100,
        description="The Workflows the subflow steps run, by name, with their uid and generation when the run "
        "started; absent when it has no subflow step.",
    )
    step_types: dict[str, ResolvedStepType] = Field(
        default_factory=dict, max_length=100,
        description="The user step types the steps name (`steptype/<name>`, `clustersteptype/<name>`), resolved "
        "when the run started: a type changed or deleted later does not change this run.",
    )


SNAPSHOT_SCHEMA: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
"""`status.workflowSpec` in the CRD: opaque to the API server. The operator alone writes status, the copy is of a
spec the Workflow's schema admitted, and the operator parses it whole (WorkflowSnapshot) whenever it reads it; the
API server validated and pruned all of it against the Workflow's schema again on every status write, about a
fifth of its CPU in a 50-step fan-out (docs/benchmarks.md)."""


class AttemptRecord(TowlineModel):
    """One finished attempt of a step, kept compactly for the audit trail."""

    attempt: int = Field(ge=1, description="The attempt's number, from 1.")
    job_name: str | None = Field(default=None, max_length=63, description="The Job that ran it.")
    started_at: datetime | None = Field(default=None, description="When it started.")
    finished_at: datetime | None = Field(default=None, description="When it ended.")
    error_class: ErrorClass | None = Field(default=None, description="How its failure was classified.")
    message: str | None = Field(default=None, max_length=1024, description="What happened, for a person.")
    image: str | None = Field(
        default=None, max_length=512,
        description="What the step's container ran, as the kubelet reported it: the image by digest.",
    )


class NotificationRecord(TowlineModel):
    """One announcement of an approval gate's event: the Job that delivers it (its outcome is the Job's)."""

    event: ApprovalEvent = Field(description="opened, decided or expired.")
    index: int = Field(ge=0, le=9, description="Which entry of spec.approvalNotifications it comes from.")
    action: str = Field(max_length=64, description="The connector that delivers it, e.g. notify.slack.")
    job_name: str = Field(max_length=63, description="The Job that delivers it, created once.")
    created_at: datetime | None = Field(default=None, description="When the operator created (or adopted) the Job.")


class StepStatus(TowlineModel):
    """Where one step stands; the current attempt inline, finished ones in `history`."""

    id: InstanceId = Field(description="The step's id; a loop instance's is the loop's id and [index] or [key].")
    phase: StepPhase = Field(
        default="Pending", description="Pending, Running, Succeeded, Failed, Skipped, Retrying or Cancelled.",
    )
    attempt: int = Field(default=0, ge=0, description="Current attempt number; 0 before the first starts.")
    attempt_group: int = Field(
        default=0, ge=0,
        description="Bumped when a person replays a step; part of the idempotency key.",
    )
    job_name: str | None = Field(default=None, max_length=63, description="The Job of the current attempt.")
    started_at: datetime | None = Field(default=None, description="When the step started.")
    finished_at: datetime | None = Field(default=None, description="When the step finished.")
    retry_at: datetime | None = Field(default=None, description="When a Retrying step's next attempt starts.")
    wake_at: datetime | None = Field(default=None, description="When a wait step ends.")
    error_class: ErrorClass | None = Field(default=None, description="How the last failed attempt was classified.")
    message: str | None = Field(default=None, max_length=2048, description="What happened, for a person.")
    output: Any = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="The step's result, readable by later steps as steps.<id>.output.",
    )
    usage: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="What a metered API reported using, e.g. ai.chat's tokens.",
    )
    idempotency_key: str | None = Field(
        default=None, max_length=128,
        description="The key the step's action sends (TOWLINE_IDEMPOTENCY_KEY): the same across retries of one "
        "attempt group.",
    )
    credentials_used: list[Annotated[ObjectName, Field(description="A Secret's name.")]] = Field(
        default_factory=list, description="Names of Secrets mounted for this step; never their values."
    )
    approval_name: str | None = Field(default=None, max_length=253, description="An approval step's Approval.")
    child_run: str | None = Field(
        default=None, max_length=253, description="A subflow step's child WorkflowRun, in this namespace.",
    )
    decided_by: str | None = Field(default=None, max_length=253, description="Who decided an approval step.")
    notifications: list[NotificationRecord] | None = Field(
        default=None, max_length=30,
        description="An approval step's announcements (spec.approvalNotifications): one Job per entry and event; "
        "absent until the first (so a step recorded by a release without notifications is written back unchanged).",
    )
    history: list[AttemptRecord] = Field(
        default_factory=list, max_length=20, description="The step's finished attempts, oldest first.",
    )
    reason: str | None = Field(
        default=None, max_length=64,
        description="Why the step is in its phase, e.g. ConditionFalse, NeedFailed, Rejected, Expired, RunTimeout.",
    )
    expires_at: datetime | None = Field(default=None, description="When an open approval gate expires.")
    gate_for: InstanceId | None = Field(
        default=None, description="Set on an approval gate the policy inserted before this mutating step.",
    )
    mutating: bool | None = Field(default=None, description="Whether the current attempt's action mutates.")
    paused_for_credentials: bool = Field(
        default=False,
        description="Failed with an auth error; retried when the run's towline.dev/resume annotation changes.",
    )
    loop: LoopStatus | None = Field(
        default=None, description="A forEach step's items and instances, recorded when it started.",
    )

    @model_serializer(mode="wrap")
    def _without_empty_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Fields at their empty default are left out on the wire: a run of 1,000 loop instances writes each
        entry's few facts, not four empty fields a thousand times (readers take the defaults back)."""
        wire: dict[str, Any] = handler(self)
        for name, empty in _EMPTY_ON_THE_WIRE:
            if wire.get(name, empty) == empty:
                wire.pop(name, None)
        return wire


_EMPTY_ON_THE_WIRE: tuple[tuple[str, Any], ...] = tuple(
    (name, empty) for field, empty in (("attempt_group", 0), ("credentials_used", []), ("history", []),
                                      ("paused_for_credentials", False))
    for name in (field, to_camel(field))
)



class WorkflowRunStatus(TowlineModel):
    """Where the run stands and what it did. Written only by the operator."""

    phase: RunPhase = Field(
        default="Pending",
        description="Pending, Running, Waiting, AwaitingApproval, RetryScheduled, Succeeded, Failed or Cancelled.",
    )
    observed_generation: int | None = Field(
        default=None, ge=0,
        description="The run's metadata.generation when this status was written (cancel and suspend raise it).",
    )
    workflow_spec: Annotated[WorkflowSnapshot | None, WithJsonSchema(SNAPSHOT_SCHEMA)] = Field(
        default=None,
        description="The Workflow's steps and policy, copied when the run started (the Workflow's spec as its "
        "schema admitted it: kubectl explain workflow.spec).",
    )
    params: FreeObject = Field(
        default_factory=dict,
        description="The params the run uses: spec.params with the Workflow's defaults filled in.",
    )
    started_at: datetime | None = Field(default=None, description="When the run started.")
    finished_at: datetime | None = Field(default=None, description="When the run finished.")
    duration: str | None = Field(
        default=None, max_length=32,
        description="How long a finished run took from startedAt to finishedAt, e.g. 1m12s; unset while it runs "
        "(the Started column ages instead) and for a run that never started.",
    )
    wake_at: datetime | None = Field(default=None, description="When the operator must look again.")
    current_step: str | None = Field(
        default=None, max_length=256, description="The ids of the steps the run is at, comma-separated.",
    )
    message: str | None = Field(default=None, max_length=2048, description="The run's state, for a person.")
    steps: list[StepStatus] = Field(
        default_factory=list, json_schema_extra=list_map("id"), description="Each step's state and history.",
    )
    conditions: Conditions = Field(
        default_factory=list,
        description="Succeeded (Unknown while running, then True or False); Reconciling (True until the run "
        "finishes) and Stalled (True when it finished without succeeding), as kstatus reads them; and Suspended, "
        "CredentialsNeedRepair, NeedsReconciliation, ReconcileFailing and Queued (waiting under the workflow's "
        "policy.maxConcurrentRuns) when they apply.",
    )
    resume_token: str | None = Field(
        default=None, max_length=253,
        description="The last towline.dev/resume annotation value the run consumed.",
    )
    output_bytes: int = Field(default=0, ge=0, description="Bytes of step outputs kept in this status.")
    outputs: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="The Workflow's spec.outputs, evaluated when the run succeeded; unset otherwise.",
    )
    earlier_requesters: list[UserName] = Field(
        default_factory=list, max_length=MAX_EARLIER_REQUESTERS,
        description="A retry's: who requested the runs it repeats (whose params it runs), oldest first. "
        "Four-eyes gates count them as requesters too.",
    )
    retried_children: dict[str, ChildRetry] | None = Field(
        default=None, max_length=100,
        description="A retry's: its subflow steps whose child run in the run retried ended Failed or Cancelled, "
        "by step id; each such step's new child is a retry of that child run. Absent when there is none.",
    )


class WorkflowRun(TowlineResource):
    """One execution of a Workflow, with its auditable history in status."""

    kind: Literal["WorkflowRun"] = "WorkflowRun"
    spec: WorkflowRunSpec = Field(description="What to run; immutable except cancel, stop and suspend.")
    # One field for server-side apply: only the operator writes status, so tracking each step's fields in
    # managedFields (a third of a 50-step run's bytes) bought nothing, and every status write paid for it
    # (docs/benchmarks.md).
    status: WorkflowRunStatus | None = Field(
        default=None, json_schema_extra={"x-kubernetes-map-type": "atomic"},
        description="Written by the operator only.",
    )

