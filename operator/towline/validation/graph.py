"""The step graph: where each step sits, what it needs, and which outputs it may read.

A workflow has three step lists. `steps` form the DAG; `finally` steps run
once it is done and may need each other; `compensations` need nothing and run
when a step that names them in `onFailure` fails. A step reads only outputs of
steps that finish before it starts: its upstream (transitively, through
`needs`), and for finally steps every step of the DAG.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from towline.api.workflow import Step, ValidationError, WorkflowSpec

SECTIONS = ("steps", "finally", "compensations")

RESERVED_ID_SUFFIX = "__approval"
"""Ids of the approval gates the policy inserts end in this (the engine's naming); users may not."""
_SECTION_ROLE = {
    "steps": "a step of the DAG",
    "finally": "a finally step, which runs after every step in spec.steps",
    "compensations": "a compensation, which runs only when a step naming it in onFailure fails",
}


@dataclass(frozen=True)
class LocatedStep:
    """A step and where the user wrote it, e.g. `spec.finally[1]`."""

    section: str
    index: int
    step: Step

    @property
    def path(self) -> str:
        return f"spec.{self.section}[{self.index}]"


def locate_steps(spec: WorkflowSpec) -> list[LocatedStep]:
    """Every step of every section, in the order the user wrote them."""
    sections = {"steps": spec.steps, "finally": spec.finally_, "compensations": spec.compensations}
    return [LocatedStep(name, index, step) for name in SECTIONS for index, step in enumerate(sections[name])]


def suggestion(name: str, candidates: Iterable[str]) -> str:
    """`; did you mean 'x'?` for a close match, else the known names (or nothing)."""
    known = sorted(set(candidates))
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    if known and len(known) <= 20:
        return f"; known: {', '.join(known)}"
    return ""


def duplicate_id_errors(located: list[LocatedStep]) -> list[ValidationError]:
    """Step ids are unique across steps, finally and compensations (CEL reads `steps.<id>`)."""
    first: dict[str, LocatedStep] = {}
    errors = []
    for item in located:
        if item.step.id.endswith(RESERVED_ID_SUFFIX):
            errors.append(ValidationError(
                field=f"{item.path}.id",
                message=f"ids ending in {RESERVED_ID_SUFFIX!r} are reserved for the approval gates the policy "
                "inserts; rename the step",
            ))
        earlier = first.setdefault(item.step.id, item)
        if earlier is not item:
            errors.append(ValidationError(
                field=f"{item.path}.id",
                message=f"{item.step.id!r} is already the id of {earlier.path}; "
                "step ids must be unique across steps, finally and compensations",
            ))
    return errors


def needs_errors(located: list[LocatedStep]) -> list[ValidationError]:
    """`needs` name existing steps: steps need steps; finally steps need steps or finally steps.

    Compensations need nothing: one starts as soon as a failed step names it in onFailure.
    """
    section_of = {item.step.id: item.section for item in located}
    allowed = {"steps": {"steps"}, "finally": {"steps", "finally"}, "compensations": set()}
    errors = []
    for item in located:
        if item.section == "compensations" and item.step.needs:
            errors.append(ValidationError(
                field=f"{item.path}.needs",
                message="a compensation starts as soon as a failed step names it in onFailure; remove needs",
            ))
            continue
        candidates = [i.step.id for i in located if i.section in allowed[item.section]]
        for position, need in enumerate(item.step.needs):
            field = f"{item.path}.needs[{position}]"
            other = section_of.get(need)
            if other is None:
                errors.append(ValidationError(
                    field=field, message=f"{need!r} is not a step id{suggestion(need, candidates)}"
                ))
            elif other not in allowed[item.section]:
                errors.append(ValidationError(
                    field=field,
                    message=f"{need!r} is {_SECTION_ROLE[other]}; a step under spec.{item.section} cannot wait "
                    "for it: remove it from needs",
                ))
    return errors


def cycle_errors(located: list[LocatedStep]) -> list[ValidationError]:
    """One error per cycle in `needs`, naming it (`a -> b -> a`) at the first step on it."""
    errors = []
    for section in SECTIONS:
        members = [item for item in located if item.section == section]
        graph = {item.step.id: list(item.step.needs) for item in members}
        path_of = {item.step.id: item.path for item in members}
        for cycle in find_cycles(graph):
            errors.append(ValidationError(
                field=f"{path_of[cycle[0]]}.needs",
                message=f"needs form a cycle: {' -> '.join([*cycle, cycle[0]])}; remove one of these needs",
            ))
    return errors


def find_cycles(graph: Mapping[str, list[str]]) -> list[list[str]]:
    """Distinct cycles of a directed graph, each rotated to start at its smallest id."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []
    found: dict[tuple[str, ...], list[str]] = {}

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if nxt not in graph:
                continue  # an unknown id: reported by needs_errors
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):]
                start = cycle.index(min(cycle))
                rotated = cycle[start:] + cycle[:start]
                found.setdefault(tuple(rotated), rotated)
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return list(found.values())


def upstream(steps: Iterable[Step]) -> dict[str, set[str]]:
    """Every step's transitive needs within one section; safe on cycles and unknown ids."""
    needs = {step.id: set(step.needs) for step in steps}
    closure: dict[str, set[str]] = {}
    for start, direct in needs.items():
        seen: set[str] = set()
        todo = list(direct)
        while todo:
            current = todo.pop()
            if current in seen or current not in needs:
                continue
            seen.add(current)
            todo.extend(needs[current])
        seen.discard(start)
        closure[start] = seen
    return closure


def readable_steps(spec: WorkflowSpec) -> dict[tuple[str, int], set[str]]:
    """For each step, keyed by (section, index): the ids whose `steps.<id>.output` it may read."""
    main_ids = {step.id for step in spec.steps}
    main_up = upstream(spec.steps)
    final_up = upstream(spec.finally_)
    readable: dict[tuple[str, int], set[str]] = {}
    for index, step in enumerate(spec.steps):
        readable["steps", index] = main_up[step.id]
    for index, step in enumerate(spec.finally_):
        readable["finally", index] = main_ids | final_up[step.id]
    for index, step in enumerate(spec.compensations):
        # What every step that may trigger this compensation has seen, plus that step itself.
        callers = [s for s in spec.steps if s.on_failure == step.id]
        readable["compensations", index] = (
            set.intersection(*[main_up[s.id] | {s.id} for s in callers]) if callers else set(main_ids)
        )
    return readable
