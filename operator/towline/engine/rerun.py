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

"Fix it in git, then retry" (`spec.retryOf.workflowChanged`): the retry runs the
Workflow as it is now (a `RetryBasis` snapshot the operator took as for a new
run), reusing a step only if it is the same in both (definition and needs), and is
refused naming every reused step that differs. A retry may change params
(`spec.params` over the finished run's, checked against the Workflow's params): a
reused step that reads a changed param is refused by name, so the plugin leaves
such steps, and those after them, to run again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from towline.api.common import MAX_EARLIER_REQUESTERS
from towline.api.run import RetryOf, StepStatus, WorkflowRun, WorkflowRunSpec, WorkflowRunStatus, WorkflowSnapshot
from towline.api.runterms import TERMINAL_RUN_PHASES
from towline.api.subflows import ChildRetry
from towline.api.workflow import Step
from towline.engine.steps import output_size

REUSED_REASON = "Reused"


@dataclass(frozen=True)
class RetryBasis:
    """What a retry runs when it is not the finished run's copy with its params: the resolved params (the finished
    run's with the retry's spec.params over them) and, for spec.retryOf.workflowChanged, the Workflow's snapshot now."""

    params: dict[str, Any]
    snapshot: WorkflowSnapshot | None = None


def start_retry(
    spec: WorkflowRunSpec, previous_workflow: str, previous: WorkflowRunStatus, workflow_generation: int,
    *, workflow_uid: str, previous_params: Mapping[str, Any] | None = None, basis: RetryBasis | None = None,
) -> tuple[WorkflowSnapshot, dict[str, Any], list[StepStatus], int] | list[str]:
    """The snapshot, params, reused step entries and their output bytes; or why it cannot retry.

    `previous_workflow` and `previous` are the finished run's `spec.workflowRef.name` and status;
    `workflow_generation` and `workflow_uid` are the Workflow's `metadata.generation` and `metadata.uid` now.
    A subflow's child retrying its parent's earlier child carries the params its parent's step passes, which
    must be `previous_params` (that child's spec.params): the retry still runs with the params of the run it retries.
    `basis`: the params (and, with workflowChanged, the snapshot) the operator resolved for a retry that changes them.
    """
    retry = spec.retry_of
    assert retry is not None, "start_retry is for runs with spec.retryOf"
    errors = _request_problems(spec, previous_workflow, previous, previous_params, basis)
    if errors or previous.workflow_spec is None:
        return errors
    fresh = basis.snapshot if basis is not None and retry.workflow_changed else None
    changed = None if fresh is not None else workflow_changed(spec, previous.workflow_spec, workflow_generation,
                                                              workflow_uid)
    if changed:
        return [changed]
    snapshot = fresh or previous.workflow_spec
    main = {step.id: step for step in snapshot.steps}
    params = dict(basis.params) if basis is not None else dict(previous.params)
    errors = _reuse_problems(spec, previous, snapshot, params)
    if errors:
        return errors
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
    return snapshot, params, reused, sum(output_size(entry.output) for entry in reused)


def _request_problems(spec: WorkflowRunSpec, previous_workflow: str, previous: WorkflowRunStatus,
                      previous_params: Mapping[str, Any] | None, basis: RetryBasis | None) -> list[str]:
    """What is wrong with the retry as asked, before its steps are looked at."""
    retry = spec.retry_of
    assert retry is not None
    errors: list[str] = []
    if previous_workflow != spec.workflow_ref.name:
        errors.append(
            f"spec.retryOf.run: run {retry.run!r} ran workflow {previous_workflow!r}, not "
            f"{spec.workflow_ref.name!r}; retry a run of the same workflow"
        )
    if previous.phase not in TERMINAL_RUN_PHASES or previous.workflow_spec is None:
        errors.append(f"spec.retryOf.run: run {retry.run!r} is {previous.phase}; retry it once it has finished")
    same_child_params = spec.trigger.type == "parent" and previous_params is not None \
        and dict(spec.params) == dict(previous_params)
    if spec.params and not same_child_params and basis is None:
        errors.append("spec.params: a retry runs with the params of the run it retries; remove spec.params")
    if retry.workflow_changed and (basis is None or basis.snapshot is None):
        errors.append("spec.retryOf.workflowChanged: the Workflow's current snapshot was not taken")
    return errors


def _reuse_problems(spec: WorkflowRunSpec, previous: WorkflowRunStatus, snapshot: WorkflowSnapshot,
                    params: Mapping[str, Any]) -> list[str]:
    """Reused steps the Workflow now defines otherwise, and reused steps that read a param the retry changes."""
    assert spec.retry_of is not None and previous.workflow_spec is not None
    retry = spec.retry_of
    errors = []
    if snapshot is not previous.workflow_spec:
        differ = differing_steps(previous.workflow_spec.steps, snapshot.steps, retry.reuse)
        if differ:
            errors.append(
                f"spec.retryOf.reuse: step(s) {', '.join(differ)} succeeded in run {retry.run!r} but differ in "
                f"workflow {spec.workflow_ref.name!r} now (generation {snapshot.generation}: definition or needs), "
                "so their outputs cannot be reused; start a new run (kubectl towline resubmit) or leave them out")
    changed = changed_params(previous.params, params)
    main = {step.id: step for step in snapshot.steps}
    for index, step_id in enumerate(retry.reuse):
        read = reads_params(main[step_id], changed) if step_id in main else []
        if read:
            errors.append(f"spec.retryOf.reuse[{index}]: step {step_id!r} reads params.{', params.'.join(read)}, "
                          "which this retry changes; leave it out so it runs again")
    return errors


def differing_steps(before: Iterable[Step], now: Iterable[Step], ids: Iterable[str]) -> list[str]:
    """Of `ids`, the steps missing from `now` or defined otherwise there than in `before` (needs included)."""
    old, new = {step.id: step for step in before}, {step.id: step for step in now}
    return [step_id for step_id in ids if step_id in old and (step_id not in new or new[step_id] != old[step_id])]


def changed_params(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The params whose value differs (one present on one side only included), sorted."""
    return sorted(name for name in {*before, *after} if before.get(name, _ABSENT) != after.get(name, _ABSENT))


_ABSENT = object()


def reads_params(step: Step, names: Iterable[str]) -> list[str]:
    """Which of `names` the step's definition reads (`params.NAME`, `params["NAME"]`, or `params` whole)."""
    text = json.dumps(step.model_dump(mode="json", by_alias=True, exclude_defaults=True))
    whole = re.search(r"\bparams\b(?!\s*(\.|\[))", text) is not None
    return [name for name in names if whole or re.search(
        rf"\bparams\s*(\.\s*{re.escape(name)}\b|\[\s*\\?['\"]{re.escape(name)}\\?['\"]\s*\])", text)]


def earlier_requesters(previous_requested_by: str | None, previous: WorkflowRunStatus,
                       also: Iterable[str] = ()) -> list[str]:
    """Who requested the runs a retry of `previous` repeats, oldest first: they chose its params.

    Read from the finished run's spec.requestedBy (admission makes it the creator) and its
    status (the operator's), never from the retry; `also`: a child retry's parent's earlier requesters.
    A long chain keeps the first and the latest.
    """
    names = list(dict.fromkeys([*also, *previous.earlier_requesters, *filter(None, [previous_requested_by])]))
    if len(names) > MAX_EARLIER_REQUESTERS:
        names = [names[0], *names[len(names) - MAX_EARLIER_REQUESTERS + 1:]]
    return names


def reusable_steps(status: WorkflowRunStatus) -> list[str]:
    """A finished run's Succeeded main-DAG steps whose needs are all reusable too; never an approval (what
    `kubectl towline retry` lists in spec.retryOf.reuse)."""
    if status.workflow_spec is None:
        return []
    phases = {entry.id: entry.phase for entry in status.steps}
    reuse: list[str] = []
    for step in status.workflow_spec.steps:
        if step.approval is None and phases.get(step.id) == "Succeeded" and all(need in reuse for need in step.needs):
            reuse.append(step.id)
    return reuse


def params_digest(params: Mapping[str, Any]) -> str:
    """SHA-256 of params as canonical JSON: whether a new child passes what an earlier child was passed."""
    text = json.dumps(dict(params), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def child_retry(child: WorkflowRun) -> ChildRetry | None:
    """What a retried parent's subflow step needs to retry its earlier child (read from the API server, and
    already found to be the retried run's own child); None when that child did not end Failed or Cancelled, or
    never started (nothing of it to reuse)."""
    status = child.status
    if status is None or status.phase not in ("Failed", "Cancelled") or status.workflow_spec is None:
        return None
    return ChildRetry(run=child.metadata["name"], uid=str(child.metadata.get("uid") or ""),
                      reuse=reusable_steps(status), params_digest=params_digest(child.spec.params))


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
