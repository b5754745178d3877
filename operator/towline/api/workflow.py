"""The Workflow resource: what a team commits to git.

The operator reads a Workflow and writes only its status: never its spec,
labels or annotations, so a GitOps-synced manifest never drifts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic.config import JsonDict

from towline.api.common import (
    IDENTIFIER_PATTERN,
    Approvers,
    Conditions,
    Duration,
    FreeObject,
    GenerationStatus,
    Identifier,
    ObjectName,
    SecretName,
    StepId,
    TowlineModel,
    TowlineResource,
    cel_rule,
    cel_rules,
    exactly_one,
    list_map,
    only_beside,
    secret_reference_rules,
)
from towline.api.loops import ForEach
from towline.api.resources import PodMetadata, StepResources
from towline.api.subflows import SubflowCall, SubflowPolicy
from towline.api.webhooks import CloudEventTrigger, WebhookTrigger
from towline_step.protocol import RETRYABLE_CLASSES
from towline_step.protocol import ErrorClass as ErrorClassEnum

_ERROR_CLASS_SCHEMA: JsonDict = {"type": "string", "enum": [name.value for name in ErrorClassEnum]}
ErrorClass = Annotated[ErrorClassEnum, WithJsonSchema(_ERROR_CLASS_SCHEMA)]
"""The step protocol's error class as a field: its names inline in the schemas (no shared definition)."""

ParamType = Literal["string", "integer", "number", "boolean", "object", "array"]

_PARAM_PYTHON_TYPES: dict[ParamType, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def fits_param_type(value: Any, kind: ParamType) -> bool:
    """Whether a JSON value is of a param's declared type (a run's value, a default)."""
    if isinstance(value, bool):  # bool is an int in Python; in a workflow `true` is never a number
        return kind == "boolean"
    return isinstance(value, _PARAM_PYTHON_TYPES[kind])

Cidr = Annotated[
    str,
    Field(
        max_length=64, description="An IPv4 or IPv6 CIDR, e.g. 203.0.113.0/24 or 2001:db8::/48.",
        json_schema_extra=cel_rules(
            cel_rule("isCIDR(self)", "must be an IPv4 or IPv6 CIDR such as 203.0.113.0/24 or 2001:db8::/48"),
        ),
    ),
]
Port = Annotated[int, Field(ge=1, le=65535, description="A TCP port, 1 to 65535.")]
STEP_TYPE_ACTION = r"(steptype|clustersteptype)/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
"""`steptype/<name>` or `clustersteptype/<name>`: a user step type by kind and name."""
ACTION_PATTERN = rf"^([a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+|{STEP_TYPE_ACTION})$"
"""A built-in action (`http.request`) or a user step type by kind and name (`steptype/deploy-cli`)."""
HostPattern = Annotated[
    str,
    Field(
        min_length=1, max_length=253,
        pattern=r"^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$",
        description="A lower-case host name or IPv4 address; `*.example.org` matches its subdomains.",
    ),
]
JobCredentials = Annotated[
    dict[Identifier, SecretName], Field(max_length=16, json_schema_extra=secret_reference_rules()),
]
"""Credential alias -> name of a Secret in this namespace, mounted for one Job only: a step's, or an approval
notification's (validated as the step it runs)."""
AllowHosts = Annotated[list[HostPattern], Field(max_length=32)]
"""The only hosts a Job's pod may connect to: a step's, or an approval notification's."""


class Param(TowlineModel):
    """A declared input of the workflow; runs supply a value or take the default."""

    name: Identifier = Field(description="Read in expressions as params.<name>.")
    type: ParamType = Field(
        default="string", description="The JSON type a value must have: string, integer, number, boolean, object "
        "or array.",
    )
    default: Any = Field(
        default=None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="Used when a run does not supply the param; must have the declared type.",
    )
    description: str = Field(default="", max_length=1024, description="What the param is for, for people.")
    required: bool = Field(default=False, description="A run must supply a value.")


class RetryPolicy(TowlineModel):
    """How often and how patiently a failed attempt is tried again."""

    limit: int = Field(default=0, ge=0, le=50, description="Extra attempts after the first.")
    backoff: Literal["exponential", "fixed"] = Field(
        default="exponential",
        description="exponential: a random delay up to baseDelaySeconds * 2^(attempt-1), capped at "
        "maxDelaySeconds (full jitter); fixed: baseDelaySeconds every time. A provider's Retry-After is a floor.",
    )
    base_delay_seconds: float = Field(
        default=5.0, ge=0, le=86400, description="The first retry's delay bound, or the fixed delay.",
    )
    max_delay_seconds: float = Field(
        default=300.0, ge=0, le=86400, description="The cap on an exponential delay; at least baseDelaySeconds.",
    )
    retry_on: list[
        Annotated[ErrorClassEnum, WithJsonSchema({**_ERROR_CLASS_SCHEMA, "description": "An error class."})]
    ] = Field(
        default_factory=lambda: list(RETRYABLE_CLASSES), max_length=8,
        description=f"The error classes worth another attempt: {', '.join(ErrorClassEnum)}. "
        f"Defaults to [{', '.join(RETRYABLE_CLASSES)}].",
    )


class EgressRule(TowlineModel):
    """One destination a step's pod may reach, besides DNS and its connector's own."""

    cidr: Cidr = Field(description="An IPv4 or IPv6 CIDR, e.g. 203.0.113.0/24.")
    ports: list[Port] = Field(default_factory=list, max_length=32, description="TCP ports; empty means all.")


class ApprovalGate(TowlineModel):
    """A human decision the run waits for; recorded on an Approval object."""

    message: str = Field(
        default="", max_length=4096,
        description="What the approver is asked, shown on the Approval; may hold ${{ }} bindings.",
    )
    approvers: Approvers = Field(
        default_factory=Approvers, description="Who may decide: listed users, or members of listed groups.",
    )
    four_eyes: bool = Field(
        default=False,
        description="The person who started the run may not approve it (nor, on a retry, whoever requested the "
        "runs it repeats).",
    )
    expires_after: Duration = Field(
        default="24h",
        description="How long the gate waits for a decision, e.g. 90s, 15m, 24h, 1h30m, 7d; then the step fails "
        "with reason Expired.",
    )


class WaitSpec(TowlineModel):
    """Pause the run for a duration or until a time (RFC 3339, may be a `${{ }}` binding)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel_rule("has(self.duration) != has(self.until)", "a wait needs exactly one of duration or until"),
        )
    )

    duration: Duration | None = Field(default=None, description="How long to wait, e.g. 90s, 15m, 24h, 1h30m, 7d.")
    until: str | None = Field(
        default=None, max_length=1024,
        description="An RFC 3339 time to wait until, e.g. 2026-01-01T08:00:00Z; may be a ${{ }} binding.",
    )


class Step(TowlineModel):
    """One node of the DAG: exactly one of `action`, `approval`, `wait` or `workflow`."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            exactly_one(("action", "approval", "wait", "workflow"),
                        "a step needs exactly one of action (with its inputs under with), approval, wait or workflow "
                        "(a subflow)"),
            only_beside("with", "action", "with holds an action's inputs; add an action or remove with"),
            only_beside("podMetadata", "action",
                        "podMetadata labels an action's pod; approval, wait and subflow steps run none"),
            only_beside("resources", "action",
                        "resources size an action's pod; approval, wait and subflow steps run none"),
            only_beside("credentials", "action",
                        "credentials are mounted into an action's Job; approval and wait steps take none"),
            cel_rule(
                "!has(self.needs) || !(self.id in self.needs)",
                "a step cannot need itself; remove its own id from needs",
                field_path=".needs",
            ),
        )
    )

    id: Identifier = Field(description="snake_case, unique across steps, finally and compensations.")
    action: str | None = Field(
        default=None, max_length=300, pattern=ACTION_PATTERN,
        description="A built-in action, e.g. http.request, notify.slack; or a user step type: "
        "steptype/<name> (this namespace) or clustersteptype/<name>.",
    )
    with_: FreeObject = Field(
        default_factory=dict, alias="with",
        description="The action's inputs (`kubectl towline connectors --json` gives each built-in's schema); "
        "any value may be a ${{ CEL }} binding.",
    )
    approval: ApprovalGate | None = Field(
        default=None, description="Makes this step a gate: the run waits for a person's decision on an Approval.",
    )
    wait: WaitSpec | None = Field(default=None, description="Makes this step a pause: a duration or a time.")
    workflow: SubflowCall | None = Field(
        default=None,
        description="Makes this step a subflow: it runs the named Workflow of this namespace as a child run "
        "(requested by this run's requester) and ends with its phase; its output is the child's status.outputs.",
    )
    needs: list[StepId] = Field(
        default_factory=list, max_length=100,
        description="Ids of the steps this one waits for; it may read their outputs (and their upstream steps').",
    )
    when: str | None = Field(default=None, max_length=4096, description="A CEL condition; false skips the step.")
    run_if_skipped: bool = Field(
        default=False, description="Run even when a step this one needs was skipped."
    )
    for_each: ForEach | None = Field(
        default=None,
        description="Run the step once per item (a loop): each instance is a step of its own, reading item and "
        "index; the step's output is the list of the instances' outputs, in item order.",
    )
    retry: RetryPolicy | None = Field(
        default=None,
        description="How a failed attempt is tried again; unset, the action's (or step type's) default policy.",
    )
    timeout_seconds: int | None = Field(
        default=None, ge=1, le=86400 * 7,
        description="Seconds one attempt may run (its Job's deadline, counted from the Job's start); unset, the "
        "step type's timeoutSeconds, else 600.",
    )
    resources: StepResources | None = Field(
        default=None,
        description="CPU and memory requests and limits of the step's container (a step type's own container); "
        "unset ones take the step type's, else the chart's stepPods.resources. A limit is at least its request.",
    )
    pod_metadata: PodMetadata | None = Field(
        default=None,
        description="More labels and annotations for the step's pod (e.g. a cost label), beside the chart's "
        "stepPods.labels and .annotations; never a towline.dev/ key.",
    )
    on_failure: str = Field(
        default="fail", max_length=63, pattern=IDENTIFIER_PATTERN,
        description="fail, continue, or the id of a step under spec.compensations to run before failing.",
    )
    credentials: JobCredentials = Field(
        default_factory=dict,
        description="Credential alias -> name of a Secret in this namespace; mounted for this step only.",
    )
    egress: list[EgressRule] = Field(
        default_factory=list, max_length=32,
        description="Destinations ({cidr, ports}) this step's pod may reach besides DNS and its connector's own.",
    )
    allow_hosts: AllowHosts = Field(
        default_factory=list,
        description="The only hosts this step's pod may connect to (e.g. api.example.com, *.example.org); "
        "required when a step with credentials has a templated host.",
    )
    allow_private_networks: list[Cidr] = Field(
        default_factory=list, max_length=16,
        description="CIDRs of private ranges this step may reach (SSRF guard opt-in), none broader than /8 (IPv4) "
        "or /7 (IPv6), e.g. 10.0.0.0/8.",
    )

    @property
    def kind(self) -> Literal["action", "approval", "wait", "subflow"]:
        if self.approval is not None:
            return "approval"
        if self.wait is not None:
            return "wait"
        if self.workflow is not None:
            return "subflow"
        return "action"


ApprovalEvent = Literal["opened", "decided", "expired"]

NotificationAction = Literal["notify.slack", "notify.email", "webhook.send", "http.request"]
"""The built-in actions an approval notification may use."""


def _events_or_their_old_name(schema: JsonDict) -> None:
    """The API server's side of the rename: `events` or (from a Workflow written before it) `on`, not both."""
    required = schema.get("required")
    if isinstance(required, list):
        schema["required"] = [name for name in required if name != "events"]
    schema.update(cel_rules(
        cel_rule("has(self.events) || has(self.on)",
                 "events is required: the events to announce, e.g. events: [opened, decided, expired]",
                 field_path=".events", reason="FieldValueRequired"),
        cel_rule("!has(self.events) || !has(self.on)", "on is the old name of events: write events only",
                 field_path=".on"),
    ))


class ApprovalNotification(TowlineModel):
    """Where to announce what happens at the run's approval gates: sent once per gate and event by a Job of its own.

    The operator fills in the message (the action's message input: Slack `text`, email `text`, the webhook's
    `payload`, the request's `json`); `with` holds the rest of the action's inputs, literal values only.
    """

    model_config = ConfigDict(json_schema_extra=_events_or_their_old_name)

    events: list[Annotated[ApprovalEvent, Field(description="opened, decided or expired.")]] = Field(
        min_length=1, max_length=3, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Which events to announce: opened (a gate waits for a decision), decided (approved or "
        "rejected) and expired.",
    )
    on: list[Annotated[ApprovalEvent, Field(description="opened, decided or expired.")]] | None = Field(
        default=None, min_length=1, max_length=3, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Deprecated: the old name of events, read when events is absent (a Workflow written before "
        "the rename). Write events: YAML 1.1, which kubectl reads, takes an unquoted on as the boolean true.",
    )
    action: NotificationAction = Field(
        description="The connector that delivers it: notify.slack, notify.email, webhook.send (signed) or "
        "http.request.",
    )
    with_: FreeObject = Field(
        default_factory=dict, alias="with",
        description="The action's inputs without its message (which the operator writes), e.g. {url: ...} for "
        "webhook.send; no ${{ }} bindings.",
    )
    credentials: JobCredentials = Field(
        default_factory=dict,
        description="Credential alias -> name of a Secret in this namespace; mounted for the notification's Job only.",
    )
    allow_hosts: AllowHosts = Field(
        default_factory=list,
        description="The only hosts the notification's pod may connect to; unset, the hosts its inputs name.",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_the_old_name(cls, data: Any) -> Any:
        """`on`, the name `events` had first, is read as `events` (and so written back as `events`)."""
        if isinstance(data, dict) and "on" in data and "events" not in data:
            data = {("events" if key == "on" else key): value for key, value in data.items()}
        return data

    @field_validator("on")
    @classmethod
    def _not_beside_events(cls, value: list[ApprovalEvent] | None) -> list[ApprovalEvent] | None:
        if value is not None:  # only when events is there too: alone, it was read as events
            raise ValueError("on is the old name of events: write events only")
        return value


ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]


class ScheduleTrigger(TowlineModel):
    """Start runs on a cron schedule, in a time zone."""

    cron: str = Field(
        max_length=256,
        description="Five fields (minute hour day-of-month month day-of-week) or a macro such as @daily.",
        json_schema_extra=cel_rules(
            cel_rule(
                r"self.matches(r'^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+(\s+\S+){4})$')",
                'cron needs five fields (minute hour day-of-month month day-of-week), e.g. "0 8 * * 1-5", '
                "or a macro such as @daily; put the zone in timeZone",
            ),
        ),
    )
    time_zone: str = Field(default="UTC", max_length=64, description="An IANA time zone, e.g. Europe/Berlin.")
    concurrency_policy: ConcurrencyPolicy = Field(
        default="Allow",
        description="When a slot comes while this workflow's earlier runs are active: Allow starts another, Forbid "
        "skips the slot, Replace cancels them and starts the new run.",
    )
    starting_deadline_seconds: int | None = Field(
        default=None, ge=1,
        description="A slot missed by more than this many seconds (the operator was down) is recorded as missed, "
        "not run late. Unset: the latest missed slot always runs.",
    )

class Trigger(TowlineModel):
    """A named way runs start: exactly one of `schedule`, `webhook` or `cloudEvent` (manual is always allowed)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            exactly_one(("schedule", "webhook", "cloudEvent"),
                        "a trigger needs exactly one of schedule, webhook or cloudEvent (manual runs need no trigger)"),
        )
    )

    name: Identifier = Field(
        description="snake_case, unique among the triggers; names scheduled runs and the webhook's URL "
        "(/hooks/<namespace>/<workflow>/<name>).",
    )
    schedule: ScheduleTrigger | None = Field(default=None, description="Start runs on a cron schedule.")
    webhook: WebhookTrigger | None = Field(
        default=None, description="Start runs from signed HTTP deliveries to the webhook ingress.",
    )
    cloud_event: CloudEventTrigger | None = Field(
        default=None,
        description="Start runs from CloudEvents (HTTP binding, structured or binary mode, JSON data) sent to the "
        "webhook ingress at /hooks/<namespace>/<workflow>/<name>; one run per event source and id.",
    )
    params: FreeObject = Field(
        default_factory=dict,
        description="Param name -> value for the runs this trigger starts.",
    )


class HistoryLimits(TowlineModel):
    """How many finished runs of the workflow are kept; older ones are deleted."""

    succeeded: int = Field(default=10, ge=0, le=1000, description="Succeeded runs kept, newest first.")
    failed: int = Field(default=10, ge=0, le=1000, description="Failed runs kept, newest first.")


class ApprovalPolicy(TowlineModel):
    """Approval gates the policy inserts before mutating actions the author left ungated."""

    require_for_mutating_actions: bool = Field(
        default=False,
        description="Insert an approval gate before every mutating action step that is not already behind an "
        "approved gate at least as strict as this policy.",
    )
    approvers: Approvers = Field(default_factory=Approvers, description="Who may decide the inserted gates.")
    four_eyes: bool = Field(
        default=False, description="The person who started the run may not approve an inserted gate.",
    )
    expires_after: Duration = Field(
        default="24h", description="How long an inserted gate waits for a decision, e.g. 15m, 24h, 7d.",
    )


class Policy(TowlineModel):
    """Limits and rules for every run of the workflow."""

    max_concurrent_runs: int | None = Field(
        default=None, ge=1, le=1000,
        description="Runs of this workflow in flight at once, whoever started them (manual, schedule, webhook, "
        "retry). A run over the limit stays Pending (no step runs; message and condition Queued say why) and "
        "starts when one finishes, oldest first by creationTimestamp. The value in force when a queued run would "
        "start applies. Unset: no limit.",
    )
    parallelism: int = Field(default=10, ge=1, le=1000, description="Steps of one run running at once.")
    run_timeout_seconds: int | None = Field(
        default=None, ge=1,
        description="Seconds a run may take from its start; then its steps are stopped and it fails (reason "
        "RunTimeout). Unset: no limit.",
    )
    history: HistoryLimits = Field(
        default_factory=HistoryLimits, description="How many finished runs are kept. Defaults to 10 of each.",
    )
    approval: ApprovalPolicy = Field(
        default_factory=ApprovalPolicy, description="Approval gates inserted before mutating actions.",
    )


def _distinct_ids(later: str, earlier: str) -> JsonDict:
    return cel_rule(
        f"!has(self.{later}) || !has(self.{earlier}) || "
        f"self.{later}.all(a, !self.{earlier}.exists(b, b.id == a.id))",
        f"ids in spec.{later} must differ from those in spec.{earlier}: "
        "step ids are unique across steps, finally and compensations",
        field_path=f".{later}",
    )


MAX_WORKFLOW_OUTPUTS = 32
"""Entries a Workflow's spec.outputs may declare."""

OutputExpression = Annotated[str, Field(min_length=1, max_length=4096, description="A CEL expression.")]


class WorkflowSpec(TowlineModel):
    """What a team commits: triggers, params, the step DAG, finally steps, compensations, policy."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            _distinct_ids("finally", "steps"),
            _distinct_ids("compensations", "steps"),
            _distinct_ids("compensations", "finally"),
            cel_rule(
                "self.steps.all(s, !has(s.onFailure) || s.onFailure in ['fail', 'continue'] || "
                "(has(self.compensations) && self.compensations.exists(c, c.id == s.onFailure)))",
                "a step's onFailure must be fail, continue, or the id of a step under spec.compensations",
                field_path=".steps",
            ),
        )
    )

    params: list[Param] = Field(
        default_factory=list, max_length=100, json_schema_extra=list_map("name"),
        description="The workflow's inputs, read in expressions as params.<name>.",
    )
    triggers: list[Trigger] = Field(
        default_factory=list, max_length=20, json_schema_extra=list_map("name"),
        description="Schedules and webhooks that start runs; creating a WorkflowRun always works.",
    )
    steps: list[Step] = Field(
        min_length=1, max_length=1000, json_schema_extra=list_map("id"),
        description="The DAG: a step starts when every step it needs has finished.",
    )
    finally_: list[Step] = Field(
        default_factory=list, alias="finally", max_length=50, json_schema_extra=list_map("id"),
        description="Steps that always run once the DAG is done, whatever its outcome.",
    )
    compensations: list[Step] = Field(
        default_factory=list, max_length=50, json_schema_extra=list_map("id"),
        description="Steps a failed step names in onFailure, run to undo its side effects.",
    )
    policy: Policy = Field(
        default_factory=Policy, description="Parallelism, run timeout, history limits and approval policy.",
    )
    suspend: bool = Field(default=False, description="No new runs start while true; runs in flight continue.")
    subflow: SubflowPolicy = Field(
        default_factory=SubflowPolicy,
        description="Whether steps of other Workflows of this namespace may run this one as a subflow "
        "(subflow: {allowed: true}); refused unless allowed.",
    )
    approval_notifications: list[ApprovalNotification] = Field(
        default_factory=list, max_length=10,
        description="Where to announce an approval gate opening, being decided or expiring (Slack, email, a "
        "signed webhook), each event once per gate.",
    )
    outputs: dict[Identifier, OutputExpression] = Field(
        default_factory=dict, max_length=MAX_WORKFLOW_OUTPUTS,
        description="What a successful run returns: output name -> a CEL expression over steps.<id>.output "
        "(and .phase, .errorClass) and params, e.g. `steps.deploy.output.version`. Evaluated once when the run "
        "succeeds and recorded in the run's status.outputs; an expression that fails, or outputs over 4096 bytes "
        "of JSON together, fail the run. A step read here must run whenever the run succeeds (no when, no "
        "onFailure: continue, not after a step that may be skipped).",
    )


class ValidationError(TowlineModel):
    """One problem the operator found that the API server could not: where, and how to fix it."""

    field: str = Field(max_length=512, description="The field's path, e.g. spec.steps[1].needs[0].")
    message: str = Field(max_length=2048, description="What is wrong and how to fix it.")


class ScheduleStatus(TowlineModel):
    """One schedule trigger's slots."""

    trigger: Identifier = Field(description="The schedule trigger's name.")
    next_schedule_time: datetime | None = Field(
        default=None, description="Its next slot; unset while the workflow or the trigger is suspended.",
    )
    last_schedule_time: datetime | None = Field(default=None, description="Its last slot that fired.")
    suspended: bool = Field(
        default=False,
        description="The trigger is suspended by its suspend.towline.dev/<trigger> annotation "
        "(kubectl towline schedule suspend): its slots start no run.",
    )


class LastRun(TowlineModel):
    """The workflow's most recently created run."""

    name: ObjectName = Field(description="The WorkflowRun's name.")
    phase: str = Field(max_length=32, description="Its phase, e.g. Running or Succeeded.")
    started_at: datetime | None = Field(default=None, description="When it started.")


class WorkflowStatus(GenerationStatus):
    """What the operator found: validity, schedules and the latest run. Written only by the operator."""

    conditions: Conditions = Field(
        default_factory=list,
        description="Ready (the spec is valid and the workflow active) and, while the spec is invalid, Stalled.",
    )
    validation_errors: list[ValidationError] = Field(
        default_factory=list, max_length=100,
        description="Problems only the operator can see (graph, CEL, connectors, cron); empty when valid.",
    )
    schedules: list[ScheduleStatus] = Field(
        default_factory=list, json_schema_extra=list_map("trigger"), description="Each schedule trigger's slots.",
    )
    next_schedule_time: datetime | None = Field(default=None, description="The earliest next slot of any schedule.")
    last_schedule_time: datetime | None = Field(default=None, description="The latest slot that fired.")
    last_run: LastRun | None = Field(default=None, description="The most recently created run.")


class Workflow(TowlineResource):
    """A workflow: triggers, params and a DAG of steps. The operator writes only its status."""

    kind: Literal["Workflow"] = "Workflow"
    spec: WorkflowSpec = Field(description="What a team commits: triggers, params, steps, policy.")
    status: WorkflowStatus | None = Field(default=None, description="Written by the operator only.")
