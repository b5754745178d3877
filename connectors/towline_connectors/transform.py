"""`data.transform`: build an output object from CEL expressions over step data.

Also home of the CEL helpers other actions use to shrink their output
(`select`). Pure: this module must never touch the network, files or the clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from towline_connectors.cellib import cel
from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.models import InputModel, OutputModel
from towline_connectors.runtime import run_blocking
from towline_connectors.spec import (
    ActionResult,
    ActionSpec,
)
from towline_connectors.wire import is_template, to_json_value


def check_expression(expression: str) -> str:
    """Compile to catch syntax errors at validation time; templates are checked later."""
    if is_template(expression):
        return expression
    try:
        cel.compile(expression)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise ValueError(f"not a valid CEL expression: {_first_line(exc)}") from None
    return expression


def evaluate(expression: str, variables: Mapping[str, Any], where: str) -> Any:
    """Evaluate one expression; failures are permanent errors that name `where`."""
    try:
        return to_json_value(cel.evaluate(expression, dict(variables)))
    # The CEL binding reports failures as many builtin types (KeyError for a
    # missing field, ZeroDivisionError, ...); all of them are the user's to fix.
    except Exception as exc:
        raise ActionError(ErrorClass.PERMANENT, f"{where}: CEL evaluation failed: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return f"no such key {exc.args[0]!r}"
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class TransformInput(InputModel):
    """`with:` of data.transform."""

    data: Any = Field(default=None, description="The value expressions read as `data` (usually a binding).")
    fields: dict[str, str] = Field(
        min_length=1,
        description="Output field name -> CEL expression over `data`, e.g. `size(data.accounts)`.",
    )

    @field_validator("fields")
    @classmethod
    def _expressions_compile(cls, fields: dict[str, str]) -> dict[str, str]:
        for name, expression in fields.items():
            try:
                check_expression(expression)
            except ValueError as exc:
                raise ValueError(f"fields.{name}: {exc}") from None
        return fields


class TransformOutput(OutputModel):
    """The output is an object with one member per entry of `fields`."""


def _evaluate_all(inputs: TransformInput) -> dict[str, Any]:
    variables = {"data": inputs.data}
    return {name: evaluate(expr, variables, f"fields.{name}") for name, expr in inputs.fields.items()}


async def run_transform(inputs: TransformInput, ctx: ActionContext) -> ActionResult:
    # In a thread so the step deadline can abandon a pathological expression.
    return ActionResult(output=await run_blocking(_evaluate_all, inputs))


SPEC = ActionSpec(
    name="data.transform",
    summary="Build an output object from CEL expressions (pure, no network)",
    input_model=TransformInput,
    output_model=TransformOutput,
    run=run_transform,
    mutating=False,
    shrink_hint="keep fewer or smaller fields in `with.fields`",
)
