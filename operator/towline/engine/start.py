"""A run's first reconcile: snapshot the workflow and resolve params, or say why it cannot start.

`start_run` is pure: the operator calls it once, stores the snapshot and the
params in `status.workflowSpec` / `status.params`, and from then on the run
never looks at the Workflow again (an edit of the Workflow never changes a
run in flight).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from towline.api.run import MAX_INPUT_BYTES, MAX_INPUT_DEPTH, TriggerInfo, WorkflowRunSpec, WorkflowSnapshot
from towline.api.steptype import ResolvedStepType
from towline.api.steptypenames import step_type_reference
from towline.api.subflows import SubflowRecord
from towline.api.workflow import Param, Step, Trigger, WorkflowSpec, fits_param_type
from towline.engine.actions import Decision, EmitEvent
from towline.engine.graph import structure_errors
from towline.engine.phases import transition_run
from towline.engine.summary import set_condition
from towline.engine.view import RunView
from towline.text import clip


def start_run(
    workflow_spec: WorkflowSpec, generation: int, run_spec: WorkflowRunSpec, *, workflow_uid: str | None = None,
    step_types: Mapping[str, ResolvedStepType | str] | None = None,
    subflows: Mapping[str, SubflowRecord | str] | None = None,
) -> tuple[WorkflowSnapshot, dict[str, Any]] | list[str]:
    """The run's snapshot and resolved params, or the list of problems (each names the field and the fix).

    `generation` and `workflow_uid` are the Workflow's metadata.generation and metadata.uid, kept in the
    snapshot so a retry can tell that Workflow from one created later under the same name. `step_types`
    maps every user type the steps name to the type as it is now, or to why it cannot be used; `subflows` every
    Workflow a subflow step names to its uid and generation now, or to why it cannot be run as a subflow.
    """
    errors = input_limit_errors(run_spec)
    if errors:
        return errors
    errors = trigger_errors(workflow_spec.triggers, run_spec.trigger)
    errors += structure_errors(workflow_spec.steps, workflow_spec.finally_, workflow_spec.compensations)
    params, param_errors = resolve_params(workflow_spec.params, run_spec.params)
    errors.extend(param_errors)
    resolved, type_errors = resolve_step_types(workflow_spec, step_types or {})
    errors.extend(type_errors)
    called, subflow_errors = resolve_subflows(workflow_spec, subflows or {})
    errors.extend(subflow_errors)
    if errors:
        return errors
    snapshot = WorkflowSnapshot(
        generation=generation,
        uid=workflow_uid,
        steps=[step.model_copy(deep=True) for step in workflow_spec.steps],
        finally_=[step.model_copy(deep=True) for step in workflow_spec.finally_],
        compensations=[step.model_copy(deep=True) for step in workflow_spec.compensations],
        policy=workflow_spec.policy.model_copy(deep=True),
        approval_notifications=[entry.model_copy(deep=True) for entry in workflow_spec.approval_notifications]
        or None,
        outputs=dict(workflow_spec.outputs) or None,
        subflows=called or None,
        step_types=resolved,
    )
    return snapshot, params


def resolve_step_types(
    workflow_spec: WorkflowSpec, available: Mapping[str, ResolvedStepType | str]
) -> tuple[dict[str, ResolvedStepType], list[str]]:
    """The user types the workflow's steps name, each copied into the snapshot, or why one cannot run."""
    return _resolve(
        workflow_spec, available,
        lambda step: step.action if step.action is not None and step_type_reference(step.action) is not None else None,
        lambda name, why: f"{name} {why or 'is not registered'}; "
        "register it (kubectl apply -f its manifest) or change the step's action",
    )


def resolve_subflows(
    workflow_spec: WorkflowSpec, available: Mapping[str, SubflowRecord | str]
) -> tuple[dict[str, SubflowRecord], list[str]]:
    """The Workflows the subflow steps run, as they are now (recorded in the snapshot), or why one cannot run."""
    return _resolve(
        workflow_spec, available,
        lambda step: step.workflow.name if step.workflow is not None else None,
        lambda name, why: f"workflow.name: Workflow {name!r} {why or 'does not exist in this namespace'}",
    )


Resolved = TypeVar("Resolved", ResolvedStepType, SubflowRecord)


def _resolve(
    workflow_spec: WorkflowSpec,
    available: Mapping[str, Resolved | str],
    name_of: Callable[[Step], str | None],
    problem: Callable[[str, str | None], str],
) -> tuple[dict[str, Resolved], list[str]]:
    """What the steps name (`name_of`: None for a step that names nothing), each found one copied; for each other,
    `problem(name, why it is not available)` after the step's id."""
    resolved: dict[str, Resolved] = {}
    errors = []
    for step in (*workflow_spec.steps, *workflow_spec.finally_, *workflow_spec.compensations):
        name = name_of(step)
        if name is None or name in resolved:
            continue
        found = available.get(name)
        if found is None or isinstance(found, str):
            errors.append(f"step {step.id}: {problem(name, found)}")
        else:
            resolved[name] = found.model_copy(deep=True)
    return resolved, errors


def input_limit_errors(run_spec: WorkflowRunSpec) -> list[str]:
    """spec.params and spec.trigger.data within MAX_INPUT_BYTES and MAX_INPUT_DEPTH (the API server checks too)."""
    errors = []
    for field, value in (("spec.params", run_spec.params), ("spec.trigger.data", run_spec.trigger.data)):
        depth = nesting_depth(value, limit=MAX_INPUT_DEPTH + 1)
        if depth > MAX_INPUT_DEPTH:
            errors.append(f"{field}: nested more than {MAX_INPUT_DEPTH} levels deep; flatten it")
            continue
        size = len(json.dumps(value, separators=(",", ":")))
        if size > MAX_INPUT_BYTES:
            errors.append(
                f"{field}: {size} bytes as JSON, more than {MAX_INPUT_BYTES}; pass a reference "
                "(a URL or an object name) instead of the data"
            )
    return errors


def trigger_errors(declared: list[Trigger], trigger: TriggerInfo) -> list[str]:
    """A webhook or schedule run must name a trigger of that kind the workflow declares.

    The API server lets only the ingress, the operator and trusted systems create such runs, but
    cannot read the Workflow: without this check a compromised ingress could start a webhook run of
    any workflow, with trigger data the workflow's author never agreed to receive from outside.
    """
    if trigger.type in ("manual", "parent"):  # a child run is checked against its parent (child_run_errors)
        return []
    def of_its_kind(declared_trigger: Trigger) -> bool:
        # A cloudEvent trigger's runs come through the webhook ingress as webhook runs.
        if trigger.type == "webhook":
            return declared_trigger.webhook is not None or declared_trigger.cloud_event is not None
        return declared_trigger.schedule is not None

    found = next((t for t in declared if t.name == trigger.name), None)
    if found is not None and of_its_kind(found):
        return []
    kinds = [t.name for t in declared if of_its_kind(t)]
    listed = ", ".join(kinds) or "none"
    return [f"spec.trigger.name: the workflow declares no {trigger.type} trigger named {trigger.name!r} "
            f"(its {trigger.type} triggers: {listed}); {trigger.type} runs come only from one of them: "
            "start a manual run instead, or add the trigger to the Workflow"]


def nesting_depth(value: Any, *, limit: int) -> int:
    """Levels of objects and lists in `value` (a scalar is 0), counted without recursion up to `limit`."""
    deepest, level = 0, [value]
    while deepest < limit:
        containers = [item for item in level if isinstance(item, (dict, list))]
        if not containers:
            break
        deepest += 1
        level = [child for item in containers for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def resolve_params(declared: list[Param], supplied: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Supplied values over defaults, each checked against its declared type."""
    params, problems = param_problems(declared, supplied)
    return params, [message for _, message in problems]


def param_problems(
    declared: list[Param], supplied: dict[str, Any],
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """`resolve_params` with each problem keyed by the param it is about (a form shows it at that field)."""
    errors: list[tuple[str, str]] = []
    names = {param.name for param in declared}
    for name in sorted(set(supplied) - names):
        known = ", ".join(sorted(names)) or "none"
        errors.append((name, f"spec.params.{name}: the workflow declares no such param (declared: {known}); "
                             "remove it"))
    params: dict[str, Any] = {}
    for param in declared:
        if param.name in supplied:
            value = supplied[param.name]
        elif param.required:
            errors.append((param.name, f"spec.params.{param.name}: required ({param.type}); add it to the run's "
                                       "spec.params"))
            continue
        else:
            value = param.default
        if value is not None and not fits_param_type(value, param.type):
            origin = "spec.params" if param.name in supplied else "the workflow's default for"
            errors.append((param.name,
                           f"{origin} {param.name}: expected {param.type}, got {type(value).__name__} {_shown(value)}"))
            continue
        params[param.name] = value
    return params, errors


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def reject_run(run: RunView, errors: list[str], now: datetime) -> Decision:
    """A run `start_run` refused: Failed from Pending, with every problem in the message."""
    status = run.status.model_copy()
    status.conditions = list(status.conditions)
    message = clip("the run cannot start: " + "; ".join(errors), 2048) or ""
    transition_run(status, "Failed")
    status.finished_at = now
    status.message = message
    status.wake_at = None
    set_condition(status, "Succeeded", "False", reason="InvalidRun", message=message, now=now)
    event = EmitEvent("Warning", "RunInvalid", clip(message, 1024) or "")
    return Decision(status=status, actions=(event,), wake_at=None)
