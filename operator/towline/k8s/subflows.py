"""A subflow step's child WorkflowRun: create it, carry cancel and suspend to it, read it.

The child is created by the operator on behalf of the parent's requester: `spec.requestedBy` is the parent's
(which admission checked when the parent was created), `spec.trigger` is `{type: parent, parent: {...}}`
(which admission lets only the operator write) and the parent run is its controller. A run found under the
child's name counts only when all of that holds: a runner who creates a run under that name first (a manual
run, since only the operator may write a parent trigger) never has it adopted, so its outputs never reach the
parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from towline.api.common import API_VERSION
from towline.api.run import WorkflowRunStatus
from towline.engine.actions import CreateChildRun, SetChildRun
from towline.engine.observed import ChildRunObservation
from towline.engine.view import RunView
from towline.jsontypes import JSON
from towline.k8s.client import WORKFLOW_RUNS, ApiError, KubeApi
from towline.k8s.labels import LABEL_MANAGED_BY, LABEL_WORKFLOW, MANAGER
from towline.k8s.objects import RunRef, owned_by_run
from towline.k8s.owners import controller_uid
from towline_connectors.wire import parse_rfc3339

LABEL_PARENT_RUN = "towline.dev/parent-run"
"""On a child run: its parent run's name (for selection only: what makes a run a child is its trigger and owner)."""


def build_child_run(run: RunRef, action: CreateChildRun) -> JSON:
    parent: JSON = {"run": run.name, "uid": run.uid, "step": action.step_id, "chain": list(action.chain)}
    if action.workflow_uid:
        parent["workflowUid"] = action.workflow_uid
    spec: JSON = {
        "workflowRef": {"name": action.workflow},
        "params": dict(action.params),
        "trigger": {"type": "parent", "parent": parent},
    }
    if action.requested_by is not None:
        spec["requestedBy"] = action.requested_by
    if action.retry_of is not None:
        spec["retryOf"] = {"run": action.retry_of.run, "reuse": list(action.retry_of.reuse)}
    if action.suspend:
        spec["suspend"] = True
    labels = {LABEL_WORKFLOW: action.workflow, LABEL_PARENT_RUN: run.name, LABEL_MANAGED_BY: MANAGER}
    return owned_by_run(run, API_VERSION, "WorkflowRun", action.name, labels=labels, spec=spec)


async def create_child_run(api: KubeApi, run: RunRef, action: CreateChildRun) -> None:
    """Create it; a 409 leaves what exists to the next pass's read, which counts it only if it is this child."""
    await api.create(WORKFLOW_RUNS.path(run.namespace), build_child_run(run, action))


async def set_child_run(api: KubeApi, namespace: str, action: SetChildRun) -> None:
    """The parent's cancel, stop or suspend switch onto the child's spec (the user switches a runner may set too)."""
    spec: JSON = {}
    if action.cancel is not None:
        spec["cancel"] = action.cancel
    if action.suspend is not None:
        spec["suspend"] = action.suspend
    if action.stop is not None:
        spec["stop"] = action.stop
    if not spec:
        return
    try:
        await api.merge_patch(WORKFLOW_RUNS.path(namespace, action.name), {"spec": spec})
    except ApiError as error:
        if error.status != 404:  # a child deleted meanwhile has nothing left to cancel or suspend
            raise


def foreign_child(body: Mapping[str, Any], run_name: str, run_uid: str, step_id: str,
                  requested_by: str | None) -> str | None:
    """Why a run under a child's name is not the child this run's step started; None when it is."""
    spec = body.get("spec") or {}
    trigger = spec.get("trigger") or {}
    parent = trigger.get("parent") or {}
    if trigger.get("type") != "parent" or parent.get("run") != run_name or parent.get("uid") != run_uid \
            or parent.get("step") != step_id:
        return "its spec.trigger does not name this run and step as its parent"
    if controller_uid(body) != run_uid:
        return "this run is not its controller"
    if spec.get("requestedBy") != requested_by:
        return f"its requestedBy {spec.get('requestedBy')!r} is not this run's requester"
    return None


async def observe_child_runs(api: KubeApi, run: RunView, status: WorkflowRunStatus) -> dict[str, ChildRunObservation]:
    """The child runs of the run's running subflow steps, read by name (one GET each)."""
    found: dict[str, ChildRunObservation] = {}
    for entry in status.steps:
        if entry.phase != "Running" or entry.child_run is None:
            continue
        body = await api.get(WORKFLOW_RUNS.path(run.namespace, entry.child_run))
        if body is not None:
            found[entry.id] = child_observation(entry.id, body, run.name, run.uid, run.spec.requested_by)
    return found


def child_observation(step_id: str, body: Mapping[str, Any], run_name: str, run_uid: str,
                      requested_by: str | None) -> ChildRunObservation:
    name = str((body.get("metadata") or {}).get("name") or "")
    foreign = foreign_child(body, run_name, run_uid, step_id, requested_by)
    if foreign is not None:
        return ChildRunObservation(step_id=step_id, name=name, phase="", foreign=foreign)
    spec, status = body.get("spec") or {}, body.get("status") or {}
    finished = status.get("finishedAt")
    outputs = status.get("outputs")
    return ChildRunObservation(
        step_id=step_id, name=name, phase=str(status.get("phase") or "Pending"),
        outputs=outputs if isinstance(outputs, dict) else None,
        message=status.get("message") if isinstance(status.get("message"), str) else None,
        cancel=spec.get("cancel") is True, suspend=spec.get("suspend") is True,
        finished_at=parse_rfc3339(finished) if isinstance(finished, str) else None,
    )
