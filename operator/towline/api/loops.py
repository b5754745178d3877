"""`forEach`: one step run once per item of a list, and the ids its instances go by.

An instance is a step like any other (its own attempts, Jobs, Approvals, history) whose id is the loop's id
followed by `[index]` or `[key]`: `deploy[0]`, `deploy[eu-west-1]`. These are the names, limits and patterns
the API, the engine, validation and the displays share. Pure data: nothing here evaluates an expression.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, WithJsonSchema

from towline.api.common import TowlineModel
from towline.api.loopids import (
    INSTANCE_ID_PATTERN,
    LOOP_KEY_PATTERN,
    instance_id,
    instance_key,
    is_loop_key,
    loop_of,
)

__all__ = ["INSTANCE_ID_PATTERN", "LOOP_KEY_PATTERN", "instance_id", "instance_key", "is_loop_key", "loop_of"]

MAX_LOOP_ITEMS = 1000
"""Items one `forEach` may run over (literal, or what its expression yields at run time)."""
MAX_LOOP_PARALLEL = 100
"""Highest `forEach.maxParallel`."""
DEFAULT_LOOP_PARALLEL = 10
"""`forEach.maxParallel` when unset: as many instances at once as a run's default `policy.parallelism`."""
MAX_LOOP_ITEMS_BYTES = 64 * 1024
"""The items of one loop as compact JSON: the run keeps them (each instance reads its `item`) until the loop ends."""
InstanceId = Annotated[str, Field(pattern=INSTANCE_ID_PATTERN, max_length=106)]
"""What `status.steps[].id` and an Approval's `spec.step` hold: a step's id, or a loop instance's."""


class ForEach(TowlineModel):
    """Run the step once per item; each instance reads `item` and `index` in its `with` and `when`."""

    items: Any = Field(
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description=f"A list (at most {MAX_LOOP_ITEMS} items), or a CEL expression over params and steps that "
        "yields one, e.g. steps.inventory.output.clusters; evaluated once, when the step starts.",
    )
    max_parallel: int = Field(
        default=DEFAULT_LOOP_PARALLEL, ge=1, le=MAX_LOOP_PARALLEL,
        description=f"Instances running (or waiting to retry) at once, 1 to {MAX_LOOP_PARALLEL}; "
        f"{DEFAULT_LOOP_PARALLEL} when unset. The run's policy.parallelism still caps its Jobs.",
    )
    fail_fast: bool = Field(
        default=False,
        description="The step fails at the first failed instance: no other instance starts, running ones are "
        "stopped (Cancelled). Unset, every instance runs and the step fails afterwards if one failed.",
    )
    key: str | None = Field(
        default=None, max_length=4096,
        description="A CEL expression over item and index giving each instance a stable id, e.g. item.name: "
        "the instance is then step[<key>] instead of step[<index>]. Keys are unique, 1 to 40 letters, digits, "
        "'.', '_' or '-'.",
    )


_ANY_LIST: dict[str, Any] = {
    "type": "array", "maxItems": MAX_LOOP_ITEMS,
    "items": {"x-kubernetes-preserve-unknown-fields": True, "description": "One item, as its instance reads it."},
}


class LoopStatus(TowlineModel):
    """What a loop step recorded when it started: its items (until it ends) and its instances' ids."""

    count: int = Field(ge=0, le=MAX_LOOP_ITEMS, description="How many items the loop runs over.")
    items: Annotated[list[Any] | None, WithJsonSchema(_ANY_LIST)] = Field(
        default=None,
        description="The items, evaluated when the step started; dropped once it ends (each instance's output "
        "is then in the step's output, in item order).",
    )
    keys: list[Annotated[str, Field(pattern=rf"^{LOOP_KEY_PATTERN}$", max_length=40,
                                    description="One instance's key.")]] | None = Field(
        default=None, max_length=MAX_LOOP_ITEMS,
        description="Each instance's key, in item order, when forEach.key is set; else instances go by index.",
    )

    def instance_ids(self, step_id: str) -> list[str]:
        keys: list[str | int] = list(self.keys) if self.keys is not None else list(range(self.count))
        return [instance_id(step_id, key) for key in keys]
