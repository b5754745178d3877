"""A retry: a new run that starts again from the failed steps of a finished one. Pure.

`start_retry` takes the finished run's status as the operator read it from the
API server, never anything the person creating the retry wrote: the reused
steps' outputs are copied from there, so a runner cannot hand a retry outputs
of their own. The retry executes the finished run's snapshot with its params,
so the reused outputs mean what they meant.

A retry runs the old snapshot only while the Workflow is still what that run
executed (same uid and same generation): otherwise a runner could bring back
steps, credentials or hosts the author has since removed. The uid matters
because a Workflow deleted and created again (a GitOps replace) starts over at
generation 1; a run whose snapshot records no uid cannot prove it, so it is
not retried either.

Four-eyes: the retry's requester chose only to run it again; whoever requested the
runs it repeats chose its params, so a retry's gates refuse them too
(`earlier_requesters`, recorded in status and on each Approval).

Which steps may be reused: main-DAG steps that Succeeded, whose needs are all
reused too (a reused step never sits downstream of one that runs again). Never
an approval: an Approval counts only for the run and step that own it, so a
retry asks again.
"""

from __future__ import annotations

from typing import Any

from towline.api.common import MAX_EARLIER_REQUESTERS
from towline.api.run import RetryOf, StepStatus, WorkflowRunSpec, WorkflowRunStatus, WorkflowSnapshot
from towline.api.runterms import TERMINAL_RUN_PHASES
from towline.engine.steps import output_size

REUSED_REASON = "Reused"


def start_retry(
    spec: WorkflowRunSpec, previous_workflow: str, previous: WorkflowRunStatus, workflow_generation: int,
    *, workflow_uid: str,
) -> tuple[WorkflowSnapshot, dict[str, Any], list[StepStatus], int] | list[str]:
    """The snapshot, params, reused step entries and their output bytes; or why it cannot retry.

    `previous_workflow` and `previous` are the finished run's `spec.workflowRef.name` and status;
    `workflow_generation` and `workflow_uid` are the Workflow's `metadata.generation` and `metadata.uid` now.
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
    changed = workflow_changed(spec, previous.workflow_spec, workflow_generation, workflow_uid)
    if changed:
        return [changed]
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


def earlier_requesters(previous_requested_by: str | None, previous: WorkflowRunStatus) -> list[str]:
    """Who requested the runs a retry of `previous` repeats, oldest first: they chose its params.

    Read from the finished run's spec.requestedBy (admission makes it the creator) and its
    status (the operator's), never from the retry. A long chain keeps the first and the latest.
    """
    names = list(dict.fromkeys([*previous.earlier_requesters, *filter(None, [previous_requested_by])]))
    if len(names) > MAX_EARLIER_REQUESTERS:
        names = [names[0], *names[len(names) - MAX_EARLIER_REQUESTERS + 1:]]
    return names


def workflow_changed(
    spec: WorkflowRunSpec, snapshot: WorkflowSnapshot, generation: int, uid: str
) -> str | None:
    """Why the Workflow is no longer the one the snapshot was taken from (uid, then generation); None if it is."""
    assert spec.retry_of is not None
    run, name = spec.retry_of.run, spec.workflow_ref.name
    if snapshot.uid is None:
        return (f"spec.retryOf.run: run {run!r} records no Workflow uid (it started before runs recorded one), "
                f"so nothing shows workflow {name!r} is the one it ran: start a new run instead")
    if snapshot.uid != uid:
        return (f"spec.retryOf.run: workflow {name!r} was deleted and created again since run {run!r} "
                f"(uid {snapshot.uid}, now {uid}); a retry runs only what that run ran: start a new run instead")
    if snapshot.generation != generation:
        return (f"spec.retryOf.run: workflow {name!r} changed since run {run!r} (generation {snapshot.generation}, "
                f"now {generation}); a retry runs only what that run ran: start a new run instead")
    return None


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
