"""`forEach`: its items are a list or CEL that yields one, within the limits; its key is CEL over the item.

A literal list is checked here (its length, its bindings); an expression is checked like any other (it
compiles, it is cheap enough, it reads only declared params and upstream steps) and its length is checked
when the step starts. `maxParallel`'s range is the schema's. Nothing is evaluated here.
"""

from __future__ import annotations

from towline.api.loops import MAX_LOOP_ITEMS, ForEach
from towline.api.workflow import ValidationError, WorkflowSpec
from towline.expressions import condition_source, template_expressions
from towline.validation.bindings import ExpressionScope, each_step_errors, template_field
from towline.validation.graph import LocatedStep


def loop_errors(spec: WorkflowSpec) -> list[ValidationError]:
    """Every problem with a step's forEach, each at `spec.<section>[i].forEach.<field>`."""
    return each_step_errors(spec, lambda step: step.for_each, _for_each_errors)


def _for_each_errors(scope: ExpressionScope, item: LocatedStep, for_each: ForEach) -> list[ValidationError]:
    errors: list[ValidationError] = []
    field = f"{item.path}.forEach"
    items = for_each.items
    if isinstance(items, list):
        if len(items) > MAX_LOOP_ITEMS:
            errors.append(ValidationError(
                field=f"{field}.items", message=f"lists {len(items)} items; the limit is {MAX_LOOP_ITEMS}. "
                "Split the list across runs, or loop over batches of items",
            ))
        for path, source in template_expressions(items):
            errors += scope.check(template_field(f"{field}.items", path), source, item)
    elif isinstance(items, str) and items.strip():
        errors += scope.check(f"{field}.items", condition_source(items), item)
    else:
        errors.append(ValidationError(
            field=f"{field}.items", message="must be a list, e.g. [eu-west-1, us-east-2], or a CEL expression "
            "over params and steps that yields one, e.g. steps.inventory.output.clusters",
        ))
    if for_each.key is not None:
        errors += scope.check(f"{field}.key", condition_source(for_each.key), item, in_loop=True)
    return errors
