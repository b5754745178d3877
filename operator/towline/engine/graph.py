"""The static shape of a run: its steps, the `needs` edges, stages, an execution order.

Built from the run's workflow snapshot on every `decide` call in O(steps +
edges); it never changes during a run. `structure_errors` is what `start_run`
checks once, so `decide` can rely on an acyclic graph whose ids are unique.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from towline.api.run import WorkflowSnapshot
from towline.api.workflow import ApprovalGate, ApprovalPolicy, Step
from towline.engine.naming import GATE_SUFFIX, gate_id

Stage = Literal["main", "finally", "compensation"]
ON_FAILURE_FAIL = "fail"
ON_FAILURE_CONTINUE = "continue"


@dataclass(frozen=True)
class Graph:
    """Steps by id, the stage each belongs to, and a topological order per stage."""

    steps: Mapping[str, Step]
    stage: Mapping[str, Stage]
    main_order: tuple[str, ...]
    finally_order: tuple[str, ...]
    approval_policy: ApprovalPolicy
    position: Mapping[str, int]
    """Declaration order across steps, compensations and finally: for stable reasons and messages."""
    instances: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """A started loop's instance ids, in item order (`add_instances`)."""
    instance_of: dict[str, str] = field(default_factory=dict)
    """The loop each instance id belongs to."""
    instance_index: dict[str, int] = field(default_factory=dict)
    """Each instance's place in its loop's items (its `index`)."""

    @classmethod
    def build(cls, snapshot: WorkflowSnapshot) -> Graph:
        steps: dict[str, Step] = {}
        stage: dict[str, Stage] = {}
        groups: tuple[tuple[list[Step], Stage], ...] = (
            (snapshot.steps, "main"), (snapshot.finally_, "finally"), (snapshot.compensations, "compensation"),
        )
        for group, name in groups:
            for step in group:
                steps[step.id] = step
                stage[step.id] = name
        table = InstanceSteps(steps)
        return cls(
            steps=table,
            instance_of=table.instance_of,
            stage=stage,
            main_order=_topological(snapshot.steps),
            finally_order=_topological(snapshot.finally_),
            approval_policy=snapshot.policy.approval,
            position={step_id: index for index, step_id in enumerate(steps)},
        )

    def add_instances(self, loop_id: str, instance_ids: list[str]) -> None:
        """A started loop's instances become steps of the graph: the loop's step without `forEach`, each under
        its own id, in the loop's stage and place. Its `onFailure` stays the loop's (the loop fails, and
        triggers it, once); everything else of a step (attempts, retries, gates, Jobs) is the instance's own.
        The instance's Step is made when first asked for (`InstanceSteps`): a pass touches few of them."""
        stage, position = cast(dict[str, Stage], self.stage), cast(dict[str, int], self.position)
        for index, entry_id in enumerate(instance_ids):
            self.instance_index[entry_id] = index
            stage[entry_id] = stage[loop_id]
            position[entry_id] = position[loop_id]
            self.instance_of[entry_id] = loop_id
        self.instances[loop_id] = tuple(instance_ids)

    def owner(self, entry_id: str) -> str:
        """The declared step an entry belongs to: the loop of an instance, else the entry itself."""
        return self.instance_of.get(entry_id, entry_id)

    def gate_step(self, gated: str) -> Step:
        """The approval step the policy inserts before the mutating step `gated`."""
        policy = self.approval_policy
        gate = ApprovalGate(
            message=f"Policy requires approval before step {gated} runs {self.steps[gated].action}.",
            approvers=policy.approvers,
            four_eyes=policy.four_eyes,
            expires_after=policy.expires_after,
        )
        # A loop instance's gate is the loop's gate under the instance's key (Step ids themselves are plain).
        return Step(id=gate_id(self.owner(gated)), approval=gate).model_copy(update={"id": gate_id(gated)})

    def dependants(self, step_id: str) -> list[str]:
        """Steps of the same stage that need `step_id` (a scan: only used when opening a gate)."""
        stage = self.stage[step_id]
        return [sid for sid, step in self.steps.items()
                if self.stage[sid] == stage and step_id in step.needs and sid not in self.instance_of]


class InstanceSteps(dict[str, Step]):
    """Steps by id, a started loop's instances included: an instance's Step is its loop's without `forEach`
    (and with `onFailure: fail`), under the instance's id, made on first use."""

    def __init__(self, declared: dict[str, Step]) -> None:
        super().__init__(declared)
        self.instance_of: dict[str, str] = {}

    def __missing__(self, entry_id: str) -> Step:
        loop_id = self.instance_of.get(entry_id)
        if loop_id is None:
            raise KeyError(entry_id)
        loop = super().__getitem__(loop_id)
        step = loop.model_copy(update={"id": entry_id, "for_each": None, "on_failure": ON_FAILURE_FAIL})
        self[entry_id] = step
        return step

    def get(self, entry_id: str, default: Any = None) -> Any:
        return self[entry_id] if entry_id in self else default  # noqa: SIM401 - dict.get skips __missing__

    def __contains__(self, entry_id: object) -> bool:
        return super().__contains__(entry_id) or entry_id in self.instance_of


def _topological(steps: list[Step]) -> tuple[str, ...]:
    """Declaration order when it already respects `needs` (the usual case), else Kahn's order."""
    position = {step.id: index for index, step in enumerate(steps)}
    if all(position.get(need, -1) < position[step.id] for step in steps for need in step.needs):
        return tuple(step.id for step in steps)
    waiting = {step.id: sum(1 for need in step.needs if need in position) for step in steps}
    dependants: dict[str, list[str]] = {step.id: [] for step in steps}
    for step in steps:
        for need in step.needs:
            if need in dependants:
                dependants[need].append(step.id)
    ready = [step.id for step in steps if waiting[step.id] == 0]
    order: list[str] = []
    while ready:
        current = ready.pop(0)
        order.append(current)
        for dependant in dependants[current]:
            waiting[dependant] -= 1
            if waiting[dependant] == 0:
                ready.append(dependant)
    return tuple(order)


def structure_errors(steps: Iterable[Step], finally_: Iterable[Step], compensations: Iterable[Step]) -> list[str]:
    """What makes a snapshot unrunnable: duplicate or reserved ids, unknown needs, cycles, bad onFailure."""
    groups = {"steps": list(steps), "finally": list(finally_), "compensations": list(compensations)}
    errors = _id_errors(groups)
    errors.extend(_needs_errors(groups))
    errors.extend(_on_failure_errors(groups))
    for name, group in groups.items():
        if len(_topological(group)) != len(group):
            errors.append(f"{name}: the needs form a cycle; remove a need so every step can start")
    return errors


def _id_errors(groups: Mapping[str, list[Step]]) -> list[str]:
    errors: list[str] = []
    seen: set[str] = set()
    for name, group in groups.items():
        for index, step in enumerate(group):
            if step.id in seen:
                errors.append(f"{name}[{index}].id: {step.id!r} is used twice; step ids are unique across "
                              "steps, finally and compensations")
            seen.add(step.id)
            if step.id.endswith(GATE_SUFFIX):
                errors.append(f"{name}[{index}].id: ids ending in {GATE_SUFFIX!r} are reserved for approval gates "
                              "the policy inserts; rename the step")
    return errors


def _needs_errors(groups: Mapping[str, list[Step]]) -> list[str]:
    errors: list[str] = []
    main_ids = {step.id for step in groups["steps"]}
    allowed = {"steps": main_ids, "finally": main_ids | {step.id for step in groups["finally"]}}
    for name, group in groups.items():
        for index, step in enumerate(group):
            if name == "compensations" and step.needs:
                errors.append(f"{name}[{index}].needs: a compensation runs as soon as a failed step names it "
                              "in onFailure; remove needs")
                continue
            errors.extend(
                f"{name}[{index}].needs: {need!r} is not a step of {name}" + (" or steps" if name == "finally" else "")
                for need in step.needs if need not in allowed[name]
            )
    return errors


def _on_failure_errors(groups: Mapping[str, list[Step]]) -> list[str]:
    errors: list[str] = []
    compensation_ids = {step.id for step in groups["compensations"]}
    for name, group in groups.items():
        for index, step in enumerate(group):
            if step.on_failure in (ON_FAILURE_FAIL, ON_FAILURE_CONTINUE):
                continue
            if name != "steps":
                errors.append(f"{name}[{index}].onFailure: only steps under spec.steps name a compensation; "
                              "use fail or continue")
            elif step.on_failure not in compensation_ids:
                errors.append(f"{name}[{index}].onFailure: {step.on_failure!r} is neither fail, continue nor the id "
                              "of a step under compensations")
    return errors
