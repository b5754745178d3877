"""`forEach`: its items are a list or CEL that yields one, within the limits; its key is CEL over the item.

A literal list is checked here (its length, its bindings); an expression is checked like any other (it
compiles, it is cheap enough, it reads only declared params and upstream steps) and its length is checked
when the step starts. `maxParallel`'s range is the schema's. Nothing is evaluated here.
"""

from __future__ import annotations

from towline.api.loops import MAX_LOOP_ITEMS
from towline.api.workflow import ValidationError, WorkflowSpec
from towline.expressions import condition_source, template_expressions
from towline.validation.bindings import check_expression
from towline.validation.graph import locate_steps, readable_steps


def loop_errors(spec: WorkflowSpec) -> list[ValidationError]:
    """Every problem with a step's forEach, each at `spec.<section>[i].forEach.<field>`."""
    params = {param.name for param in spec.params}
    located = locate_steps(spec)
    step_ids = {item.step.id for item in located}
    readable = readable_steps(spec)
    errors: list[ValidationError] = []
    for item in located:
        for_each = item.step.for_each
        if for_each is None:
            continue
        field = f"{item.path}.forEach"
        allowed = readable[item.section, item.index]
        items = for_each.items
        if isinstance(items, list):
            if len(items) > MAX_LOOP_ITEMS:
                errors.append(ValidationError(
                    field=f"{field}.items", message=f"lists {len(items)} items; the limit is {MAX_LOOP_ITEMS}. "
                    "Split the list across runs, or loop over batches of items",
                ))
            for path, source in template_expressions(items):
                errors += check_expression(f"{field}.items{path}", source, params=params, step_ids=step_ids,
                                           readable=allowed)
        elif isinstance(items, str) and items.strip():
            errors += check_expression(f"{field}.items", condition_source(items), params=params,
                                       step_ids=step_ids, readable=allowed)
        else:
            errors.append(ValidationError(
                field=f"{field}.items", message="must be a list, e.g. [eu-west-1, us-east-2], or a CEL expression "
                "over params and steps that yields one, e.g. steps.inventory.output.clusters",
            ))
        if for_each.key is not None:
            errors += check_expression(f"{field}.key", condition_source(for_each.key), params=params,
                                       step_ids=step_ids, readable=allowed, in_loop=True)
    return errors
