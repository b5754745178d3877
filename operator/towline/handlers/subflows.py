"""The reads a run's pass makes for subflows: the Workflows its subflow steps name, its parent, its children.

Glue only: the checks are the engine's (towline.engine.subflows, towline.engine.start) and the API calls
towline.k8s's.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from towline.api.run import WorkflowRun, WorkflowRunStatus, WorkflowSnapshot
from towline.api.subflows import ChildRetry, SubflowRecord
from towline.api.workflow import WorkflowSpec
from towline.engine import RunView
from towline.engine.observed import Observed
from towline.engine.rerun import child_retry
from towline.engine.subflows import child_run_errors
from towline.handlers.context import RunDeps
from towline.jsontypes import JSON
from towline.k8s.client import KubeApi
from towline.k8s.owners import controller_uid
from towline.k8s.runs import read_run, read_workflow
from towline.k8s.subflows import foreign_child, observe_child_runs
from towline_connectors.wire import parse_rfc3339

PARENT_RECHECK = timedelta(seconds=1)
"""How soon a child run looks again at a parent whose status does not show the child yet: the parent's pass creates
the child before it writes its own status, so for a moment the child is ahead of its parent's record."""
PARENT_PATIENCE = timedelta(seconds=60)
"""How long a child run waits for its parent's status to show it; then it is judged on what the parent shows."""


def subflow_allowed(workflow: JSON) -> bool:
    """The Workflow's spec.subflow.allowed, read off its body."""
    subflow = (workflow.get("spec") or {}).get("subflow") or {}
    return isinstance(subflow, dict) and subflow.get("allowed") is True


async def subflows_of(api: KubeApi, namespace: str, spec: WorkflowSpec) -> dict[str, SubflowRecord | str]:
    """Each Workflow a subflow step names, as it is now, or why it cannot run as a subflow (for start_run)."""
    names = {step.workflow.name for step in (*spec.steps, *spec.finally_, *spec.compensations)
             if step.workflow is not None}
    found: dict[str, SubflowRecord | str] = {}
    for name in sorted(names):
        body = await read_workflow(api, namespace, name)
        if body is None:
            found[name] = "does not exist in this namespace; create it or change the step's workflow.name"
        elif not subflow_allowed(body):
            found[name] = ("does not allow runs as a subflow: set spec.subflow.allowed: true in it, or change the "
                           "step's workflow.name")
        else:
            meta = body.get("metadata") or {}
            found[name] = SubflowRecord(uid=str(meta.get("uid") or ""), generation=int(meta.get("generation") or 0))
    return found


async def child_run_problems(deps: RunDeps, run: WorkflowRun, workflow: JSON, *, retried_uid: str | None = None,
                             ) -> tuple[list[str], list[str]]:
    """A child run's problems (it is not the child its parent's step started), and the parent's earlier requesters
    (a retried parent's: four eyes in the child refuses them as the parent's gates do). `retried_uid`: a child
    retry's, the uid of the run its spec.retryOf names, as just read."""
    parent_ref = run.spec.trigger.parent
    parent = None
    if parent_ref is not None:
        raw = await read_run(deps.api, run.metadata["namespace"], parent_ref.run)
        parent = WorkflowRun.model_validate(raw) if raw is not None else None
    uid = str((workflow.get("metadata") or {}).get("uid") or "") or None
    owner = controller_uid({"metadata": run.metadata})
    problems = child_run_errors(run.spec, owner, parent, uid, subflow_allowed(workflow), retried_uid=retried_uid)
    inherited = list(parent.status.earlier_requesters) if parent is not None and parent.status is not None else []
    return problems, inherited


async def retried_children_of(deps: RunDeps, previous: WorkflowRun, snapshot: WorkflowSnapshot,
                              reused: set[str]) -> dict[str, ChildRetry] | None:
    """A retry's subflow steps that run again and whose child in the run retried (`previous`, as read from the API
    server) ended Failed or Cancelled: each new child retries that child. The child is read by the name the
    retried run's status records and counts only when it is that run's own child (towline.k8s.subflows)."""
    entries = {entry.id: entry for entry in (previous.status.steps if previous.status is not None else [])}
    meta = previous.metadata
    found: dict[str, ChildRetry] = {}
    for step in (*snapshot.steps, *snapshot.finally_, *snapshot.compensations):
        entry = entries.get(step.id)
        if step.workflow is None or step.id in reused or entry is None or entry.child_run is None:
            continue
        body = await read_run(deps.api, meta["namespace"], entry.child_run)
        if body is None or foreign_child(body, meta["name"], meta["uid"], step.id, previous.spec.requested_by):
            continue
        retry = child_retry(WorkflowRun.model_validate(body))
        if retry is not None:
            found[step.id] = retry
    return found or None


async def with_child_runs(deps: RunDeps, observed: Observed, view: RunView, status: WorkflowRunStatus) -> Observed:
    """`observed` with the child runs of the run's running subflow steps (none read when there are none)."""
    if not any(entry.phase == "Running" and entry.child_run is not None for entry in status.steps):
        return observed
    children = await observe_child_runs(deps.api, view, status)
    return dataclasses.replace(observed, child_runs=children)


async def wait_for_parent(deps: RunDeps, run: WorkflowRun, now: datetime) -> datetime | None:
    """When a new child run should look again because its parent's status does not record it yet; None: go on
    (the parent records it, is gone, or did not within PARENT_PATIENCE: the child's checks then judge it)."""
    ref = run.spec.trigger.parent
    if ref is None:
        return None
    raw = await read_run(deps.api, run.metadata["namespace"], ref.run)
    if raw is None or (raw.get("metadata") or {}).get("uid") != ref.uid:
        return None
    entries = ((raw.get("status") or {}).get("steps")) or []
    if any(isinstance(e, dict) and e.get("id") == ref.step and e.get("childRun") == run.metadata.get("name")
           for e in entries):
        return None
    created = run.metadata.get("creationTimestamp")
    if isinstance(created, str) and now - parse_rfc3339(created) > PARENT_PATIENCE:
        return None
    return now + PARENT_RECHECK
