"""A run's display model: its facts and its node tree, built once from a WorkflowRun document.

`kubectl towline status` (text tree), `graph` (Mermaid, DOT), `describe` and the web view (live runs and the
archive's kept runs alike) render this model and derive nothing themselves, as Argo's CLI and UI both render the
controller's `status.nodes`. A Workflow's graph is the same nodes without a run's state.

Pure: a run as the API server or the archive returned it in, frozen dataclasses out; no I/O, no clock. Tolerant:
a person looks at whatever a run holds (one the operator has not started, one archived by an older release), so a
missing or malformed field is absent here, never an error.

Node order is the order a person reads: the main DAG in the workflow's order, then the compensations a failure
triggered, then finally; a policy gate (`status.steps[].gateFor`) stands just before the step it guards and takes
that step's needs, and the step then needs the gate. Values are copied from named fields only, so a field added
to a run later reaches no page or terminal unless it is added here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from towline.api.loopids import loop_of
from towline.api.runterms import ApprovalDecision
from towline.api.steptypenames import step_type_reference
from towline.jsontypes import JSON
from towline.lenient import as_mapping, as_text
from towline.plugin.keptrecords import kept_run
from towline.plugin.loopcounts import LoopCounts, loop_counts

StepKind = Literal["action", "code", "step-type", "approval", "policy-gate", "wait", "subflow"]
"""What a node is, as the Workflow schema says it: a built-in `action`, a `code` action (code.python, code.wasm),
a user `step-type` (`action: steptype/<name>` or `clustersteptype/<name>`), an `approval` step, the `policy-gate`
the approval policy inserted before a mutating step, a `wait`, or a `subflow` (`workflow: {name}`: a child run)."""
Section = Literal["steps", "compensations", "finally"]
SECTIONS: tuple[Section, ...] = ("steps", "compensations", "finally")
"""The Workflow's lists of steps, in the order they run and are shown."""
CODE_ACTION_FAMILY = "code."
"""The connectors that run the workflow author's own code are named `code.<language>` (code.python, code.wasm)."""
GATE_LABEL = "approval (policy)"


@dataclass(frozen=True)
class Trigger:
    """What started the run (`spec.trigger`)."""

    type: str = "manual"
    name: str | None = None
    delivery_id: str | None = None
    scheduled_time: str | None = None


@dataclass(frozen=True)
class RetryOf:
    run: str
    reuse: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunFacts:
    """One run's header: a row of the runs list, the top of `status`, `describe` and the run page."""

    name: str
    namespace: str = ""
    workflow: str = ""
    generation: int | None = None
    phase: str = "Pending"
    message: str | None = None
    current_step: str | None = None
    requested_by: str | None = None
    trigger: Trigger = field(default_factory=Trigger)
    retry_of: RetryOf | None = None
    created: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    outputs: Mapping[str, Any] | None = None
    """The Workflow's spec.outputs as the run recorded them when it succeeded (`status.outputs`); None before."""
    cancel: bool = False
    suspend: bool = False


@dataclass(frozen=True)
class Attempt:
    """A finished attempt of a step (`status.steps[].history[]`)."""

    number: int | None = None
    job_name: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    error_class: str | None = None
    message: str | None = None
    image: str | None = None


@dataclass(frozen=True)
class StepNode:
    """One node: what the workflow declares for the step and, in a run, where it stands (`phase` None: no run)."""

    id: str
    section: Section
    kind: StepKind
    action: str | None = None
    needs: tuple[str, ...] = ()
    """What it waits for in the drawing: its declared needs, or the policy gate before it."""
    gate_for: str | None = None
    compensates: tuple[str, ...] = ()
    """The steps whose `onFailure` names this compensation."""
    when: str | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    credentials: tuple[str, ...] = ()
    """The Secret names the step declares (never values)."""
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    attempt: int = 0
    job_name: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    retry_at: str | None = None
    wake_at: str | None = None
    expires_at: str | None = None
    error_class: str | None = None
    output: Any = None
    credentials_used: tuple[str, ...] = ()
    approval_name: str | None = None
    decided_by: str | None = None
    subflow: str | None = None
    """A subflow step's Workflow."""
    child_run: str | None = None
    """A subflow step's child WorkflowRun, once it started (same namespace)."""
    history: tuple[Attempt, ...] = ()
    for_each: bool = False
    """A loop (`forEach`): one node for all its instances."""
    loop: LoopCounts | None = None
    """A loop's instances by state, in a run."""
    instances: tuple[StepNode, ...] = ()
    """A loop's listed instances (and their policy gates), in item order; those not started yet are not listed."""

    @property
    def label(self) -> str:
        """What the step does, in a word or two: its action, or approval, approval (policy), wait; a loop's
        starts with `forEach`."""
        if self.kind == "policy-gate":
            return GATE_LABEL
        what = self.kind if self.kind in ("approval", "wait") else self.action or ""
        if self.kind == "subflow":
            what = f"workflow {self.subflow}"
        return f"forEach {what}" if self.for_each else what

    @property
    def gate(self) -> bool:
        """A person decides it: an approval step or a policy gate."""
        return self.kind in ("approval", "policy-gate")

    @property
    def decision(self) -> ApprovalDecision | None:
        if not self.decided_by:
            return None
        return "Rejected" if self.reason == "Rejected" else "Approved"

    @property
    def waiting_for_decision(self) -> bool:
        return self.gate and bool(self.approval_name) and self.phase == "Running"


@dataclass(frozen=True)
class RunTree:
    """A run as every view draws it: its facts and its nodes in reading order."""

    facts: RunFacts
    nodes: tuple[StepNode, ...] = ()
    archived: bool = False

    def section(self, name: Section) -> tuple[StepNode, ...]:
        return tuple(node for node in self.nodes if node.section == name)


def edges(nodes: Iterable[StepNode]) -> list[tuple[str, str]]:
    """(need, step) for every drawn need between drawn nodes."""
    listed = list(nodes)
    ids = {node.id for node in listed}
    return [(need, node.id) for node in listed for need in node.needs if need in ids]


def failure_edges(nodes: Iterable[StepNode]) -> list[tuple[str, str]]:
    """(failed step, compensation) for every drawn compensation whose step is drawn."""
    listed = list(nodes)
    ids = {node.id for node in listed}
    return [(source, node.id) for node in listed for source in node.compensates if source in ids]


def _items(value: Any) -> list[JSON]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _names(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


def run_facts(run: JSON) -> RunFacts:
    meta, spec, status = as_mapping(run.get("metadata")), as_mapping(run.get("spec")), as_mapping(run.get("status"))
    trigger = as_mapping(spec.get("trigger"))
    retry = as_mapping(spec.get("retryOf"))
    generation = as_mapping(status.get("workflowSpec")).get("generation")
    return RunFacts(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        workflow=str(as_mapping(spec.get("workflowRef")).get("name") or ""),
        generation=generation if isinstance(generation, int) else None,
        phase=str(status.get("phase") or "Pending"),
        message=as_text(status.get("message")),
        current_step=as_text(status.get("currentStep")),
        requested_by=as_text(spec.get("requestedBy")),
        trigger=Trigger(type=str(trigger.get("type") or "manual"), name=as_text(trigger.get("name")),
                        delivery_id=as_text(trigger.get("deliveryId")),
                        scheduled_time=as_text(trigger.get("scheduledTime"))),
        retry_of=RetryOf(str(retry["run"]), _names(retry.get("reuse"))) if retry.get("run") else None,
        created=as_text(meta.get("creationTimestamp")),
        started_at=as_text(status.get("startedAt")),
        finished_at=as_text(status.get("finishedAt")),
        params=as_mapping(status.get("params")) or as_mapping(spec.get("params")),
        outputs=status["outputs"] if isinstance(status.get("outputs"), dict) else None,
        cancel=spec.get("cancel") is True,
        suspend=spec.get("suspend") is True,
    )


def kind_of(step: JSON) -> StepKind:
    """A declared step's kind: exactly one of `approval`, `wait` or `action` (the schema's rule)."""
    if step.get("approval") is not None:
        return "approval"
    if step.get("wait") is not None:
        return "wait"
    if isinstance(step.get("workflow"), dict):
        return "subflow"
    action = str(step.get("action") or "")
    if step_type_reference(action) is not None:
        return "step-type"
    return "code" if action.startswith(CODE_ACTION_FAMILY) else "action"


def _declared(step: JSON, section: Section, *, needs: tuple[str, ...], compensates: tuple[str, ...]) -> StepNode:
    return StepNode(
        id=str(step["id"]), section=section, kind=kind_of(step), action=as_text(step.get("action")), needs=needs,
        compensates=compensates, when=as_text(step.get("when")), inputs=as_mapping(step.get("with")),
        credentials=tuple(sorted(str(name) for name in as_mapping(step.get("credentials")).values())),
        for_each=isinstance(step.get("forEach"), dict), subflow=as_text(as_mapping(step.get("workflow")).get("name")),
    )


def _with_instances(node: StepNode, entry: JSON, members: list[JSON]) -> StepNode:
    """A loop's node with its instances (as nodes of their own) and their counts."""
    instances = tuple(
        _with_state(StepNode(id=str(member["id"]), section=node.section,
                             kind="policy-gate" if member.get("gateFor") else node.kind, action=node.action,
                             gate_for=as_text(member.get("gateFor"))), member)
        for member in members
    )
    total = _count(as_mapping(entry.get("loop")).get("count"))
    phases = (instance.phase for instance in instances if instance.kind != "policy-gate")
    return replace(node, instances=instances, loop=loop_counts(total, phases))


def _by_owner(entries: list[JSON]) -> tuple[dict[str, JSON], dict[str, list[JSON]]]:
    """The entries of steps and gates by id, and the entries of each loop's instances (and their gates)."""
    states: dict[str, JSON] = {}
    members: dict[str, list[JSON]] = {}
    for entry in entries:
        if not isinstance(entry.get("id"), str):
            continue
        loop = _loop_of(entry)
        if loop is not None:
            members.setdefault(loop, []).append(entry)
        else:
            states[str(entry["id"])] = entry
    return states, members


def _loop_of(entry: JSON) -> str | None:
    """The loop an entry belongs to: an instance's (`deploy[0]`), or the instance's its policy gate guards."""
    return loop_of(str(entry.get("gateFor") or entry.get("id") or ""))


def _attempt(record: JSON) -> Attempt:
    number = record.get("attempt")
    return Attempt(
        number=number if isinstance(number, int) else None, job_name=as_text(record.get("jobName")),
        started_at=as_text(record.get("startedAt")), finished_at=as_text(record.get("finishedAt")),
        error_class=as_text(record.get("errorClass")), message=as_text(record.get("message")),
        image=as_text(record.get("image")),
    )


def _with_state(node: StepNode, entry: JSON) -> StepNode:
    """The node as the run's `status.steps[]` entry says it stands (Pending when the run has no entry yet)."""
    return replace(
        node, phase=str(entry.get("phase") or "Pending"), reason=as_text(entry.get("reason")),
        message=as_text(entry.get("message")), attempt=_count(entry.get("attempt")),
        job_name=as_text(entry.get("jobName")), started_at=as_text(entry.get("startedAt")),
        finished_at=as_text(entry.get("finishedAt")), retry_at=as_text(entry.get("retryAt")),
        wake_at=as_text(entry.get("wakeAt")), expires_at=as_text(entry.get("expiresAt")),
        error_class=as_text(entry.get("errorClass")), output=entry.get("output"),
        credentials_used=_names(entry.get("credentialsUsed")), approval_name=as_text(entry.get("approvalName")),
        decided_by=as_text(entry.get("decidedBy")), child_run=as_text(entry.get("childRun")),
        history=tuple(_attempt(record) for record in _items(entry.get("history"))),
    )


def _entry_kind(entry: JSON) -> StepKind:
    if entry.get("gateFor"):
        return "policy-gate"
    return "approval" if entry.get("approvalName") else "action"


def step_nodes(spec: JSON, entries: list[JSON] | None = None) -> tuple[StepNode, ...]:
    """The nodes of a Workflow's spec (`entries` None: no run, no state) or of a run's snapshot and its entries.

    A run draws only the compensations a failure triggered; a Workflow draws all of them.
    """
    in_run = entries is not None
    states, members = _by_owner(entries or [])
    gates = {str(entry["gateFor"]): entry for entry in states.values() if isinstance(entry.get("gateFor"), str)}
    compensated: dict[str, list[str]] = {}
    for step in _items(spec.get("steps")):
        target = step.get("onFailure")
        if isinstance(target, str) and target not in ("fail", "continue"):
            compensated.setdefault(target, []).append(str(step.get("id")))
    nodes: list[StepNode] = []
    for section in SECTIONS:
        for step in _items(spec.get(section)):
            step_id = step.get("id")
            if not isinstance(step_id, str):
                continue
            if section == "compensations" and in_run and step_id not in states and step_id not in gates:
                continue
            needs = _names(step.get("needs"))
            gate = gates.get(step_id)
            if gate is not None:
                gate_node = StepNode(id=str(gate["id"]), section=section, kind="policy-gate", needs=needs,
                                     gate_for=step_id)
                nodes.append(_with_state(gate_node, gate))
                needs = (gate_node.id,)
            node = _declared(step, section, needs=needs, compensates=tuple(compensated.get(step_id, ())))
            if in_run:
                node = _with_state(node, states.get(step_id, {}))
                if node.for_each:
                    node = _with_instances(node, states.get(step_id, {}), members.get(step_id, []))
            nodes.append(node)
    placed = {node.id for node in nodes}
    # Entries the snapshot does not explain (a run without its copy of the workflow) are still shown.
    nodes.extend(
        _with_state(StepNode(id=step_id, section="steps", kind=_entry_kind(entry),
                             gate_for=as_text(entry.get("gateFor"))), entry)
        for step_id, entry in states.items() if step_id not in placed
    )
    return tuple(nodes)


def run_tree(run: JSON, *, archived: bool = False) -> RunTree:
    """A WorkflowRun (live, or as the archive kept it) as every view draws it."""
    status = as_mapping(run.get("status"))
    return RunTree(run_facts(run), step_nodes(as_mapping(status.get("workflowSpec")), _items(status.get("steps"))),
                   archived=archived)


def archived_run_tree(item: JSON) -> RunTree:
    """An archived run (`archive.towline.dev` ArchivedRun): the WorkflowRun its record kept, drawn as a live one."""
    return run_tree(kept_run(item), archived=True)
