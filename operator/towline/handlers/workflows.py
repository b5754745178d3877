"""Reconcile one Workflow: validate it, fire its due schedules, trim its run history, report in status.

Writes only `status` (conditions with observedGeneration, validation errors,
schedule times, last run). Never the spec, labels or annotations: a synced
manifest must not drift.
"""

from __future__ import annotations

import logging
from datetime import datetime

from towline.api.workflow import HistoryLimits, WorkflowSpec, WorkflowStatus
from towline.handlers.context import WorkflowDeps
from towline.handlers.history import enforce_history_limits
from towline.handlers.steptypes import catalog_of, step_types_of
from towline.k8s.client import Conflict, KubeApi
from towline.k8s.runs import list_workflows, read_workflow, write_workflow_status
from towline.logs import log_context
from towline.triggers.cron import fire_due_schedules
from towline.validation import MAX_ERRORS, validate_workflow_manifest, workflow_conditions
from towline.validation.subflows import callers_of, calls_subflows, subflow_reference_errors, workflows_by_name

log = logging.getLogger(__name__)


async def reconcile_workflow(deps: WorkflowDeps, namespace: str, name: str) -> datetime | None:
    with log_context(namespace=namespace, workflow=name):
        return await _reconcile_workflow(deps, namespace, name)


async def _reconcile_workflow(deps: WorkflowDeps, namespace: str, name: str) -> datetime | None:
    raw = await read_workflow(deps.api, namespace, name)
    if raw is None:  # deleted: its callers judge themselves again, now without it
        for caller in callers_of(name, await workflows_of(deps.api, namespace)):
            deps.requeue((namespace, caller))
        return None
    now = deps.now()
    generation = int(raw["metadata"].get("generation", 0))
    previous = WorkflowStatus.model_validate(raw.get("status") or {})
    raw_spec = raw.get("spec") or {}
    step_types = await step_types_of(deps.api, deps.definitions, namespace, raw_spec)
    spec, errors = validate_workflow_manifest(raw_spec, catalog_of(deps.definitions, namespace, step_types))
    changed = previous.observed_generation != generation
    if spec is not None and (changed or calls_subflows(spec)):
        others = await workflows_of(deps.api, namespace)
        if calls_subflows(spec):
            errors = [*errors, *subflow_reference_errors(name, spec, others)]
        if changed:  # once per change (so two that call each other stop): callers judge it as it is now
            for caller in callers_of(name, others):
                deps.requeue((namespace, caller))
    status = previous.model_copy(deep=True)
    status.observed_generation = generation
    status.validation_errors = errors[:MAX_ERRORS]
    status.conditions = workflow_conditions(previous.conditions, errors, generation, now)
    wake_at = None
    if spec is not None and not errors:
        in_flight = [run.name for run in deps.runs.in_line(namespace, name) if not run.finished]
        wake_at = await fire_due_schedules(
            deps.api, raw, spec, status, now=now, creator=deps.creator, known_in_flight=in_flight,
        )
    # The Workflow changed (policy.maxConcurrentRuns may have grown) or a run of it finished.
    deps.wake_queued_runs(namespace, name)
    last = deps.runs.last_run_of(namespace, name)
    if last is not None:
        status.last_run = last
    limits = spec.policy.history if spec is not None else HistoryLimits()
    await enforce_history_limits(deps.api, namespace, name, limits, deps.runs.finished_runs_of(namespace, name),
                                 now=now)
    try:
        await write_workflow_status(deps.api, raw, status.to_wire())
    except Conflict:
        deps.requeue((namespace, name))
    return wake_at


async def workflows_of(api: KubeApi, namespace: str) -> dict[str, WorkflowSpec | None]:
    """The namespace's Workflows by name (None: one whose spec does not parse), for the subflow checks."""
    return workflows_by_name(await list_workflows(api, namespace))
