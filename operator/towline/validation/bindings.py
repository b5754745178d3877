"""CEL in a workflow: `when` conditions and `${{ }}` bindings compile and read only what exists.

Checked statically, once per workflow generation: the expression compiles;
its root variables are params, steps, trigger and run; every `params.<name>`
is declared; every `steps.<id>` is a step upstream of the one reading it (its
output exists by then). Nothing is evaluated here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from towline.api.workflow import Step, ValidationError, WorkflowSpec
from towline.expression_cost import static_cost_problem
from towline.expressions import (
    ROOT_VARIABLES,
    TEMPLATE,
    referenced_steps,
    string_leaves,
    syntax_error,
    template_expressions,
    unknown_variables,
)
from towline.validation.graph import LocatedStep, locate_steps, readable_steps, suggestion
from towline_connectors.wire import TEMPLATE_MARKER, is_template

_STRING_LITERAL = re.compile(r"""'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*\"""", re.S)
_PARAM_DOTTED = re.compile(r"(?<![.\w])params\s*\.\s*([A-Za-z_]\w*)")
_PARAM_INDEXED = re.compile(r"(?<![.\w])params\s*\[\s*['\"]([^'\"]+)['\"]\s*\]")
_ROOTS = ", ".join(sorted(ROOT_VARIABLES))
LOOP_VARIABLES = frozenset({"item", "index"})
"""What a loop instance reads besides the roots: its item and its place in the items."""
_INDEXED_STEP = re.compile(r"\bsteps\s*\.\s*([A-Za-z_]\w*)\s*\[")


def referenced_params(source: str) -> set[str]:
    """Names read through `params.<name>` or `params['<name>']` (not `trigger.params.x`)."""
    code = _STRING_LITERAL.sub("''", source)
    return set(_PARAM_DOTTED.findall(code)) | set(_PARAM_INDEXED.findall(source))


@dataclass(frozen=True)
class ExpressionScope:
    """What a Workflow's expressions may read: its declared params, its steps, and for each step the steps
    upstream of it (whose outputs exist by the time it runs). Built once per Workflow; every check of a
    binding, `when`, loop items or subflow params goes through `check`."""

    params: frozenset[str]
    step_ids: frozenset[str]
    readable: dict[tuple[str, int], set[str]]
    located: list[LocatedStep]

    @classmethod
    def of(cls, spec: WorkflowSpec) -> ExpressionScope:
        located = locate_steps(spec)
        return cls(params=frozenset(param.name for param in spec.params),
                   step_ids=frozenset(item.step.id for item in located), readable=readable_steps(spec), located=located)

    def check(self, field: str, source: str, at: LocatedStep | None, *, in_loop: bool = False) -> list[ValidationError]:
        """`check_expression` for an expression of the step `at` (None: outside every step, reading no step)."""
        readable = self.readable[at.section, at.index] if at is not None else set()
        return check_expression(field, source, params=set(self.params), step_ids=set(self.step_ids),
                                readable=readable, in_loop=in_loop)


Part = TypeVar("Part")


def each_step_errors(
    spec: WorkflowSpec,
    part: Callable[[Step], Part | None],
    check: Callable[[ExpressionScope, LocatedStep, Part], list[ValidationError]],
) -> list[ValidationError]:
    """`check` of each step, finally step and compensation that has the `part` checked (e.g. its forEach), given
    the Workflow's expression scope."""
    scope = ExpressionScope.of(spec)
    errors: list[ValidationError] = []
    for item in scope.located:
        found = part(item.step)
        if found is not None:
            errors += check(scope, item, found)
    return errors


def template_field(base: str, path: str) -> str:
    """The field of a `${{ }}` found at `path` inside the value at `base`: `base.key`, `base[0]`, or `base`."""
    return f"{base}.{path}" if path and not path.startswith("[") else f"{base}{path}"


def expression_errors(spec: WorkflowSpec) -> list[ValidationError]:
    """Every CEL problem in steps, finally steps, compensations and trigger params."""
    scope = ExpressionScope.of(spec)
    errors: list[ValidationError] = []
    for item in scope.located:
        in_loop = item.step.for_each is not None
        for field, source in _step_expressions(item, errors):
            errors += scope.check(field, source, item, in_loop=in_loop)
    for index, trigger in enumerate(spec.triggers):
        for path, source in template_expressions(trigger.params):
            errors += scope.check(f"spec.triggers[{index}].params.{path}", source, None)
        errors += _unclosed(f"spec.triggers[{index}].params", trigger.params)
    return errors


def _step_expressions(item: LocatedStep, errors: list[ValidationError]) -> Iterator[tuple[str, str]]:
    """(field, CEL source) of every expression a step holds; malformed templates go to `errors`."""
    step = item.step
    if step.when is not None:
        whole = TEMPLATE.fullmatch(step.when.strip())  # the engine accepts `when: "${{ cond }}"` too
        if whole is not None:
            yield f"{item.path}.when", whole.group(1).strip()
        elif is_template(step.when):
            errors.append(ValidationError(
                field=f"{item.path}.when",
                message="when is plain CEL; write it without ${{ }}, e.g. when: \"params.notify == true\"",
            ))
        else:
            yield f"{item.path}.when", step.when
    templated: list[tuple[str, Any]] = [(f"{item.path}.with", step.with_)]
    if step.approval is not None:
        templated.append((f"{item.path}.approval.message", step.approval.message))
    if step.wait is not None and step.wait.until is not None:
        templated.append((f"{item.path}.wait.until", step.wait.until))
    for base, value in templated:
        errors += _unclosed(base, value)
        for path, source in template_expressions(value):
            yield template_field(base, path), source


def check_expression(
    field: str, source: str, *, params: set[str], step_ids: set[str], readable: set[str], in_loop: bool = False,
) -> list[ValidationError]:
    """Problems with one expression at `field`; empty when it compiles and reads only what exists.

    `in_loop`: the expression belongs to a forEach step's instance, which reads `item` and `index` too.
    """
    if not source.strip():
        return [ValidationError(field=field, message="empty expression; write CEL between ${{ and }}")]
    cost = static_cost_problem(source)
    if cost is not None:
        return [ValidationError(field=field, message=cost)]
    error = syntax_error(source)
    if error is not None:
        return [ValidationError(field=field, message=f"CEL does not compile: {error}")]
    unknown = unknown_variables(source, ROOT_VARIABLES | LOOP_VARIABLES if in_loop else ROOT_VARIABLES)
    errors = [
        ValidationError(
            field=field,
            message=f"{name!r} is defined only in a step with forEach (an instance's item and its index); "
            "add forEach to this step, or read params or steps",
        ) if name in LOOP_VARIABLES else ValidationError(
            field=field,
            message=f"{name!r} is not defined; expressions read {_ROOTS}{suggestion(name, ROOT_VARIABLES)}",
        )
        for name in sorted(unknown)
    ]
    code = _STRING_LITERAL.sub("''", source)
    for step_id in sorted(set(_INDEXED_STEP.findall(code))):
        errors.append(ValidationError(
            field=field,
            message=f"steps.{step_id}[...] reads a step by index: another step cannot read one loop instance; "
            f"read steps.{step_id}.output[0] (a loop's output lists its instances' outputs in item order)",
        ))
    for name in sorted(referenced_params(source) - params):
        errors.append(ValidationError(
            field=field,
            message=f"params.{name} is not declared under spec.params{suggestion(name, params)}",
        ))
    for step_id in sorted(referenced_steps(source)):
        if step_id not in step_ids:
            errors.append(ValidationError(
                field=field, message=f"steps.{step_id} is not a step{suggestion(step_id, step_ids)}"
            ))
        elif step_id not in readable:
            errors.append(ValidationError(
                field=field,
                message=f"reads steps.{step_id}, which is not upstream of this step, so its output may not "
                f"exist yet; add {step_id!r} to needs (directly or through a step it needs)",
            ))
    return errors


def _unclosed(field: str, value: Any) -> list[ValidationError]:
    """`${{` without its `}}`: the text would be sent literally, which is never what was meant."""
    problems = []
    for path, text in string_leaves(value, field):
        if text.count(TEMPLATE_MARKER) > len(TEMPLATE.findall(text)):
            problems.append(ValidationError(field=path, message="a ${{ is not closed with }}"))
    return problems

