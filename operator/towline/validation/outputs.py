"""`spec.outputs`: each compiles, reads only params and steps, and only steps sure to have run.

An output is evaluated once the run has succeeded, so it may read any step of
`spec.steps` or `spec.finally` that runs whenever the run succeeds: not one with
a `when` (it may be skipped), not one with `onFailure: continue` (it may have
failed), not one after a step that may be skipped (it would be skipped too),
and never a compensation (those run only when something failed). Nothing is
evaluated here.
"""

from __future__ import annotations

from towline.api.workflow import Step, ValidationError, WorkflowSpec
from towline.expressions import OUTPUT_ROOTS, condition_source, referenced_steps, unknown_variables
from towline.validation.bindings import check_expression

_ROOTS = " and ".join(sorted(OUTPUT_ROOTS))


def output_errors(spec: WorkflowSpec) -> list[ValidationError]:
    """Every problem with `spec.outputs`, each at `spec.outputs.<name>`."""
    if not spec.outputs:
        return []
    params = {param.name for param in spec.params}
    sure = _steps_sure_to_run(spec.steps) | _steps_sure_to_run(spec.finally_)
    compensations = {step.id for step in spec.compensations}
    step_ids = {step.id for step in (*spec.steps, *spec.finally_)} | compensations
    errors: list[ValidationError] = []
    for name, text in spec.outputs.items():
        field = f"spec.outputs.{name}"
        source = condition_source(text)
        found = check_expression(field, source, params=params, step_ids=step_ids, readable=step_ids)
        errors += found
        if found:
            continue
        for root in sorted(unknown_variables(source, OUTPUT_ROOTS)):
            errors.append(ValidationError(
                field=field, message=f"{root!r} is not readable here; outputs read {_ROOTS}",
            ))
        for step_id in sorted(referenced_steps(source) - sure):
            why = ("is a compensation, which runs only when a step failed" if step_id in compensations
                   else "may not run in a run that succeeds (it has a when condition or onFailure: continue, "
                   "or runs after a step that may be skipped)")
            errors.append(ValidationError(
                field=field, message=f"reads steps.{step_id}, which {why}; read a step that always runs, "
                f"or remove the condition from {step_id}",
            ))
    return errors


def _steps_sure_to_run(steps: list[Step]) -> set[str]:
    """Ids of the steps in one section that run whenever the run succeeds."""
    by_id = {step.id: step for step in steps}
    skippable: dict[str, bool] = {}

    def may_be_skipped(step_id: str, seen: frozenset[str]) -> bool:
        if step_id not in by_id or step_id in seen:
            return False  # another section's step, or a cycle (reported elsewhere)
        if step_id not in skippable:
            step = by_id[step_id]
            skippable[step_id] = step.when is not None or (not step.run_if_skipped and any(
                may_be_skipped(need, seen | {step_id}) for need in step.needs))
        return skippable[step_id]

    return {step.id for step in steps
            if not may_be_skipped(step.id, frozenset()) and step.on_failure != "continue"}
