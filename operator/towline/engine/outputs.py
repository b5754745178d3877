"""A run's outputs: the Workflow's `spec.outputs` evaluated once, when the run succeeds.

Each output is CEL over `steps.<id>.{output, phase, errorClass}` and `params`,
evaluated through the same bounded machinery as `when` and bindings (a cost
estimate refuses an expensive expression before it runs). The outputs together
are capped like one step's output, so a subflow step can return a child run's
outputs as its own. Nothing else enters the context: the step outputs a run
keeps were redacted by the runner in the pod, and the operator holds no
Secret value, so no credential can reach `status.outputs` from here.

Pure: no I/O, no clock. A problem is a value (`OutputsProblem`) the run fails with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from towline.engine.bindings import Bindings
from towline.engine.steps import MAX_STEP_OUTPUT_BYTES, output_size
from towline.expressions import OUTPUT_ROOTS, ExpressionError, condition_source, evaluate

MAX_OUTPUTS_BYTES = MAX_STEP_OUTPUT_BYTES
"""All of a run's outputs together, as compact JSON: what one step may return, so a subflow can return them."""

@dataclass(frozen=True)
class OutputsProblem:
    """Why a run that would have succeeded cannot record its outputs; it fails with this message."""

    message: str


def evaluate_outputs(declared: Mapping[str, str], bindings: Bindings) -> dict[str, Any] | OutputsProblem:
    """Every declared output, or the first problem; never a part of them."""
    sources = {name: condition_source(source) for name, source in declared.items()}
    try:
        context = bindings.context_for(sources.values())
    except ExpressionError as error:
        return OutputsProblem(f"spec.outputs: {error}")
    scoped = {root: context[root] for root in OUTPUT_ROOTS}
    values: dict[str, Any] = {}
    for name, source in sources.items():
        try:
            values[name] = evaluate(source, scoped)
        except ExpressionError as error:
            return OutputsProblem(f"spec.outputs.{name} could not be evaluated: {error}")
    size = output_size(values)
    if size > MAX_OUTPUTS_BYTES:
        return OutputsProblem(
            f"spec.outputs are {size} bytes of JSON together; the limit is {MAX_OUTPUTS_BYTES} bytes. "
            "Return only the values a caller needs, or a reference to where the data is stored"
        )
    return values
