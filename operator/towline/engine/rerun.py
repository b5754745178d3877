"""A retry: a new run that starts again from the failed steps of a finished one. Pure.

`start_retry` takes the finished run's status as the operator read it from the
API server, never anything the person creating the retry wrote: the reused
steps' outputs are copied from there, so a runner cannot hand a retry outputs
of their own. The retry executes the finished run's snapshot with its params,
so the reused outputs mean what they meant.

A retry runs the old snapshot only while the Workflow is still what that run
executed (same generation): otherwise a runner could bring back steps,
credentials or hosts the author has since removed.

Which steps may be reused: main-DAG steps that Succeeded, whose needs are all
reused too (a reused step never sits downstream of one that runs again). Never
an approval: an Approval counts only for the run and step that own it, so a
retry asks again.
"""

from __future__ import annotations

from typing import Any

from towline.api.run import RetryOf, StepStatus, WorkflowRunSpec, WorkflowRunStatus, WorkflowSnapshot
from towline.engine.phases import TERMINAL_RUN_PHASES
from towline.engine.steps import output_size

REUSED_REASON = "Reused"


def start_retry(
    spec: WorkflowRunSpec, previous_workflow: str, previous: WorkflowRunStatus, workflow_generation: int,
) -> tuple[WorkflowSnapshot, dict[str, Any], list[StepStatus], int] | list[str]:
    """The snapshot, params, reused step entries and their output bytes; or why it cannot retry.

    `previous_workflow` and `previous` are the finished run's `spec.workflowRef.name` and status;
    `workflow_generation` is the Workflow's `metadata.generation` now.
    """
    retry = spec.retry_of
    assert retry is not None, "start_retry is for runs with spec.retryOf"
    errors: list[str] = []
    if previous_workflow != spec.workflow_ref.name:
        errors.append(
            f"spec.retryOf.run: run {retry.run!r} ran workflow {previous_workflow!r}, not "
            f"{spec.workflow_ref.name!r}; retry a run of the same workflow"
        )
    if previous.phase not in TERMINAL_RUN_PHASES or previous.workflow_spec is None:
        errors.append(f"spec.retryOf.run: run {retry.run!r} is {previous.phase}; retry it once it has finished")
    if spec.params:
        errors.append("spec.params: a retry runs with the params of the run it retries; remove spec.params")
    if errors or previous.workflow_spec is None:
        return errors
    if previous.workflow_spec.generation != workflow_generation:
        return [f"spec.retryOf.run: workflow {spec.workflow_ref.name!r} changed since run {retry.run!r} "
                f"(generation {previous.workflow_spec.generation}, now {workflow_generation}); "
                "a retry runs only what that run ran: start a new run instead"]
    snapshot = previous.workflow_spec
    main = {step.id: step for step in snapshot.steps}
    before = {entry.id: entry for entry in previous.steps}
    reuse = set(retry.reuse)
    for index, step_id in enumerate(retry.reuse):
        field = f"spec.retryOf.reuse[{index}]"
        entry = before.get(step_id)
        if step_id not in main:
            errors.append(f"{field}: {step_id!r} is not a step of the run's main DAG; list only its steps")
        elif main[step_id].approval is not None:
            errors.append(f"{field}: {step_id!r} is an approval; an approval counts only for its own run, "
                          "so a retry asks again: remove it")
        elif entry is None or entry.phase != "Succeeded":
            phase = "Pending" if entry is None else entry.phase
            errors.append(f"{field}: step {step_id!r} of run {retry.run!r} is {phase}; only Succeeded steps "
                          "can be reused")
        else:
            missing = [need for need in main[step_id].needs if need not in reuse]
            if missing:
                errors.append(f"{field}: {step_id!r} needs {', '.join(missing)}, which would run again; "
                              "reuse those too or leave this step out")
    if errors:
        return errors
    reused = [_reused(before[step_id], retry) for step_id in retry.reuse]
    return snapshot, dict(previous.params), reused, sum(output_size(entry.output) for entry in reused)


def _reused(entry: StepStatus, retry: RetryOf) -> StepStatus:
    return StepStatus(
        id=entry.id,
        phase="Succeeded",
        attempt=entry.attempt,
        started_at=entry.started_at,
        finished_at=entry.finished_at,
        output=entry.output,
        usage=entry.usage,
        credentials_used=list(entry.credentials_used),
        reason=REUSED_REASON,
        message=f"output reused from run {retry.run}",
    )
