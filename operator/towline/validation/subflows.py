"""Subflow steps: what one Workflow can check alone, and what takes the other Workflows of its namespace.

`subflow_errors(spec)` needs nothing else: a subflow step takes no fields of an action (its child run retries,
times and reaches what its own steps say), no forEach yet, and its params' bindings compile and read only
declared params and upstream steps. `subflow_reference_errors(name, spec, others)` is given the namespace's
Workflows where they can be seen (the operator's pass over the Workflow, `kubectl towline validate` over the
files it reads): the Workflow a step names exists, allows runs as a subflow, declares the params passed and
gets the required ones, and no chain of subflows leads back to `name` (`a -> b -> a`). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from towline.api.subflows import SubflowCall, subflow_chain_text
from towline.api.workflow import Step, ValidationError, WorkflowSpec
from towline.expressions import template_expressions
from towline.validation.bindings import ExpressionScope, each_step_errors, template_field
from towline.validation.graph import LocatedStep, locate_steps
from towline.validation.parsing import parse_workflow_spec

_NOT_FOR_SUBFLOWS = (
    ("retry", "the child run's steps retry as their own retry says"),
    ("timeout_seconds", "limit the child Workflow's run with its policy.runTimeoutSeconds"),
    ("egress", "the child Workflow's steps declare what they reach"),
    ("allow_hosts", "the child Workflow's steps declare what they reach"),
    ("allow_private_networks", "the child Workflow's steps declare what they reach"),
    ("for_each", "a subflow step runs once; loop inside the child Workflow"),
)


def subflow_errors(spec: WorkflowSpec) -> list[ValidationError]:
    """Every problem of a subflow step that the Workflow shows alone, at `spec.<section>[i].<field>`."""
    return each_step_errors(spec, lambda step: step.workflow, _call_errors)


def _call_errors(scope: ExpressionScope, item: LocatedStep, call: SubflowCall) -> list[ValidationError]:
    errors = [ValidationError(field=f"{item.path}.{Step.model_fields[name].alias or _camel(name)}",
                              message=f"does not apply to a subflow step: {fix}; remove it")
              for name, fix in _NOT_FOR_SUBFLOWS if name in item.step.model_fields_set]
    for path, source in template_expressions(call.params):
        errors += scope.check(template_field(f"{item.path}.workflow.params", path), source, item)
    return errors


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def subflow_reference_errors(
    name: str, spec: WorkflowSpec, others: Mapping[str, WorkflowSpec | None], *, all_known: bool = True,
) -> list[ValidationError]:
    """The Workflows `spec`'s subflow steps name, checked against `others` (the namespace's Workflows by name;
    None: one that exists but is not valid itself). `all_known` false (files read offline): a name not among
    `others` may exist in the cluster, so it is not reported."""
    errors: list[ValidationError] = []
    for item in locate_steps(spec):
        call = item.step.workflow
        if call is None:
            continue
        field = f"{item.path}.workflow"
        if call.name not in others and call.name != name:
            if not all_known:
                continue
            errors.append(ValidationError(field=f"{field}.name", message=f"no Workflow {call.name!r} in this "
                                          "namespace; a subflow runs a Workflow of the same namespace: create it "
                                          "or correct the name"))
            continue
        child = spec if call.name == name else others[call.name]
        if child is None:
            continue
        if not child.subflow.allowed:
            errors.append(ValidationError(field=f"{field}.name", message=f"Workflow {call.name!r} does not allow "
                                          "runs as a subflow: set spec.subflow.allowed: true in it, or call another"))
        declared = {param.name: param for param in child.params}
        for param in sorted(set(call.params) - set(declared)):
            errors.append(ValidationError(field=f"{field}.params.{param}", message=f"Workflow {call.name!r} "
                                          f"declares no param {param!r} (declared: {', '.join(declared) or 'none'}); "
                                          "remove it"))
        for wanted in child.params:
            if wanted.required and wanted.name not in call.params:
                errors.append(ValidationError(field=f"{field}.params", message=f"Workflow {call.name!r} requires "
                                              f"param {wanted.name!r} ({wanted.type}); pass it here"))
    cycle = _cycle_through(name, spec, others)
    if cycle is not None:
        errors.append(ValidationError(field=cycle[1], message=f"subflows call each other in a cycle: "
                                      f"{cycle[0]}; a Workflow may not run itself, directly or through others"))
    return errors


def _calls(spec: WorkflowSpec) -> list[tuple[str, str]]:
    """(Workflow name, field of the step naming it) for each subflow step, in manifest order."""
    return [(item.step.workflow.name, f"{item.path}.workflow.name") for item in locate_steps(spec)
            if item.step.workflow is not None]


def _cycle_through(name: str, spec: WorkflowSpec, others: Mapping[str, WorkflowSpec | None]) -> tuple[str, str] | None:
    """The first chain of subflow calls from `name` back to `name` (`a -> b -> a`) and the field starting it."""
    for first, field in _calls(spec):
        stack: list[tuple[str, list[str]]] = [(first, [name])]
        seen: set[str] = set()
        while stack:
            current, path = stack.pop()
            if current == name:
                return subflow_chain_text(path, name), field
            if current in seen:
                continue
            seen.add(current)
            child = others.get(current)
            if child is None:
                continue
            stack.extend((callee, [*path, current]) for callee, _ in reversed(_calls(child)))
    return None


def workflows_by_name(documents: Iterable[Mapping[str, Any]]) -> dict[str, WorkflowSpec | None]:
    """Workflow objects (from the API server, or the documents of files) by name, their specs parsed (None: a
    spec that does not parse, which its own validation reports)."""
    found: dict[str, WorkflowSpec | None] = {}
    for document in documents:
        name = (document.get("metadata") or {}).get("name")
        spec = document.get("spec")
        if isinstance(name, str) and document.get("kind", "Workflow") == "Workflow":
            found[name] = parse_workflow_spec(spec)[0] if isinstance(spec, dict) else None
    return found


def calls_subflows(spec: WorkflowSpec) -> bool:
    return any(step.workflow is not None for step in (*spec.steps, *spec.finally_, *spec.compensations))


def callers_of(name: str, workflows: Mapping[str, WorkflowSpec | None]) -> list[str]:
    """The Workflows with a subflow step naming `name` (to judge it again when it changes)."""
    return sorted(caller for caller, spec in workflows.items()
                  if caller != name and spec is not None and any(called == name for called, _ in _calls(spec)))
