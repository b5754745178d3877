"""Reconcile one WorkflowRun: observe, decide, act, write status once.

Glue only. The decision is the engine's; the API calls are towline.k8s's.
Level-triggered: every pass starts from the newest known version of the run
(its latest watch event, else a fresh read) and of its children found by label,
so a restart, a missed event or a second pass all converge on the same result;
a stale version only costs a write conflict and another pass.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from towline.api.run import WorkflowRun, WorkflowRunStatus, WorkflowSnapshot
from towline.engine import (
    RESUME_ANNOTATION,
    TERMINAL_RUN_PHASES,
    QueueLimits,
    RunInLine,
    RunView,
    decide,
    earlier_requesters,
    held_in_queue,
    max_concurrent_runs,
    reject_run,
    start_retry,
    start_run,
    workflow_runs_in_line,
)
from towline.engine.actions import Action, Decision
from towline.engine.events import run_events
from towline.engine.kstatus import kstatus_fields
from towline.engine.traces import TracedRun, finished_spans, traced_run
from towline.handlers.context import Definitions, RunDeps
from towline.handlers.failures import clear_reconcile_failure
from towline.handlers.retrybasis import retry_basis
from towline.handlers.steptypes import catalog_of, step_types_of
from towline.handlers.subflows import (
    child_run_problems,
    retried_children_of,
    subflows_of,
    wait_for_parent,
    with_child_runs,
)
from towline.handlers.wasmmodules import module_problems
from towline.k8s.actions import apply_actions
from towline.k8s.client import Conflict
from towline.k8s.concurrency import side_by_side
from towline.k8s.objects import RunRef
from towline.k8s.runs import hold_for_archive, list_runs, read_run, read_workflow, write_run_status
from towline.logs import log_context
from towline.metrics import record_run_transition
from towline.validation import validate_workflow_manifest
from towline.validation.catalog import ConnectorCatalog
from towline.validation.steptypes import StepTypeCatalog
from towline_connectors.wire import parse_rfc3339

log = logging.getLogger(__name__)

QUEUED_RECHECK = timedelta(seconds=60)
"""A queued run is woken when a run of its workflow finishes, the Workflow changes or the archive releases a run of
its namespace; this slow fallback covers a wake-up lost with a restart of the process or a missed watch event, not
the normal path."""


def run_catalog(builtins: ConnectorCatalog, status: WorkflowRunStatus) -> StepTypeCatalog:
    """The built-ins and the step types as this run resolved them when it started (never as they are now)."""
    snapshot = status.workflow_spec
    types = {action: resolved.spec for action, resolved in snapshot.step_types.items()} if snapshot else {}
    return StepTypeCatalog(builtins, types)

async def reconcile_run(deps: RunDeps, namespace: str, name: str) -> datetime | None:
    """One pass; returns when to look again (also persisted in status.wakeAt)."""
    with log_context(namespace=namespace, run=name):
        return await _reconcile_run(deps, namespace, name)


async def _reconcile_run(deps: RunDeps, namespace: str, name: str) -> datetime | None:
    raw = deps.memory.latest((namespace, name)) or await read_run(deps.api, namespace, name)
    if raw is None:
        await deps.children.keep_step_pods(namespace, name, deps.now(), run_over=True)  # deleted while running
        return None
    # Never mutated below (the engine copies before it changes a status): the next pass may get it again.
    run = deps.memory.parse((namespace, name), raw)
    status = previous = run.status or WorkflowRunStatus()
    now = deps.now()
    meta = raw["metadata"]
    generation = meta.get("generation")
    if status.phase in TERMINAL_RUN_PHASES:
        await _keep_finished_run(deps, raw, run, status, now)
        return None
    problems: list[str] = []
    held = None
    held_raw, later = await _may_pass(deps, raw, run, status, now)
    if held_raw is None:
        return later
    raw, meta = held_raw, held_raw["metadata"]
    if status.workflow_spec is None:
        # Read once for both: the limit a queued run waits on, and the definition the run snapshots.
        workflow = await read_workflow(deps.api, namespace, run.spec.workflow_ref.name)
        held = await hold_if_queued(deps, run, meta, status, now, workflow_body=workflow)
        if held is None:
            status, problems = await snapshot_workflow(deps, run, status, workflow)
    view = RunView(
        name=name,
        namespace=namespace,
        uid=meta["uid"],
        workflow_name=run.spec.workflow_ref.name,
        spec=run.spec,
        status=status,
        resume_token=(meta.get("annotations") or {}).get(RESUME_ANNOTATION),
    )
    if held is not None:
        decision = held
    elif problems:
        decision = reject_run(view, problems, now)
    else:
        observed = await deps.children.observe(namespace, name, meta["uid"], status)
        observed = await with_child_runs(deps, observed, view, status)
        decision = decide(view, observed, now, run_catalog(deps.definitions.catalog, status),
                          web_view_url=deps.web_view_url)
    clear_reconcile_failure(decision.status, now)
    trace = _traced(deps, meta, run)
    ref = RunRef(name=name, namespace=namespace, uid=meta["uid"], workflow=run.spec.workflow_ref.name, trace=trace)
    written = kstatus_fields(decision.status, generation, now)
    pod_check = await act_and_keep_pods(deps, ref, decision.actions, now, upkeep=held is None and not problems,
                                        run_over=written.phase in TERMINAL_RUN_PHASES)
    if await _write(deps, raw, written, run):
        # Metrics: derived from the written status transition (never inside the engine).
        record_run_transition(namespace, view.workflow_name, run.spec.trigger.type, previous, written)
        _announce(deps, trace, previous, written, meta=meta, now=now)
        if written.phase in TERMINAL_RUN_PHASES and previous.phase not in TERMINAL_RUN_PHASES:
            deps.decided((namespace, name), written.phase)
    if written.phase in TERMINAL_RUN_PHASES:
        await deps.finished({**raw, "status": written.to_wire()})
        return None
    if held is not None:
        return now + QUEUED_RECHECK
    return min((at for at in (decision.wake_at, pod_check) if at is not None), default=None)


def _traced(deps: RunDeps, meta: dict[str, Any], run: WorkflowRun) -> TracedRun | None:
    """The run's identity for its spans and events; None when neither goes anywhere."""
    if deps.spans is None and deps.events is None:
        return None
    return traced_run(meta, workflow=run.spec.workflow_ref.name, trigger=run.spec.trigger.type)


def _announce(deps: RunDeps, trace: TracedRun | None, before: WorkflowRunStatus, after: WorkflowRunStatus, *,
              meta: dict[str, Any], now: datetime) -> None:
    """The spans this write ended (attempts, approval waits, the run), queued for export, and the CloudEvents it
    announces (phase changes, approvals asked and decided), queued for the sink: derived from the write that was
    made, so the process that made it emits them once, whichever process started them."""
    if trace is None:
        return
    if deps.spans is not None:
        deps.spans.emit(finished_spans(trace, before, after, created_at=parse_rfc3339(meta["creationTimestamp"])))
    if deps.events is not None:
        deps.events.emit(run_events(trace, before, after, now))


async def hold_if_queued(
    deps: RunDeps, run: WorkflowRun, meta: dict[str, Any], status: WorkflowRunStatus, now: datetime,
    *, workflow_body: dict[str, Any] | None,
) -> Decision | None:
    """The run's decision while it must wait (towline.engine.admission decides); None: it may start.

    `workflow_body` is the run's Workflow as just read: the limit is the one it has now. The engine is asked first
    on the watch-fed view of the workflow's runs (and of the namespace's runs awaiting the archive), which answers
    every pass of a queued run without an API call; a run that view lets start is asked about once more on a fresh
    list from the API server, because a view that is behind may not show a run ahead of it (a process that has
    just started, or a run created in the same second with a name that sorts first).
    """
    namespace, workflow = meta["namespace"], run.spec.workflow_ref.name
    limits = QueueLimits(max_concurrent_runs(workflow_body), deps.archive.max_runs_awaiting,
                         deps.runs.awaiting_archive(namespace))
    me = RunInLine(meta["name"], parse_rfc3339(meta["creationTimestamp"]), started=False, finished=False)

    def ask(others: Iterable[RunInLine]) -> Decision | None:
        return held_in_queue(status, cancel=run.spec.cancel, stop=run.spec.stop, namespace=namespace,
                             workflow=workflow, run=me, others=others, limits=limits, now=now)

    held = ask(deps.runs.in_line(namespace, workflow))
    if held is None and limits.counts_runs:
        held = ask(workflow_runs_in_line(await list_runs(deps.api, namespace), workflow))
    return held


async def _keep_finished_run(deps: RunDeps, raw: dict[str, Any], run: WorkflowRun,
                             status: WorkflowRunStatus, now: datetime) -> None:
    """Nothing more to do for a finished run: its Workflow's pass keeps the history within the limits. Only a spec
    change after the end (a late cancel) or a run finished by an older operator gets its kstatus fields written
    once, so tools never wait on a finished run."""
    meta = raw["metadata"]
    await deps.children.keep_step_pods(meta["namespace"], meta["name"], now, run_over=True)
    finished = kstatus_fields(status, meta.get("generation"), now)
    if finished != status:
        await _write(deps, raw, finished, run)


async def _may_pass(deps: RunDeps, raw: dict[str, Any], run: WorkflowRun, status: WorkflowRunStatus, now: datetime,
                    ) -> tuple[dict[str, Any] | None, datetime | None]:
    """The run to decide on (held for the archive), or None and when to look again: somebody wrote first, or a new
    child run is ahead of its parent's record of it (towline.handlers.subflows.wait_for_parent)."""
    if status.workflow_spec is None and run.spec.trigger.type == "parent":
        later = await wait_for_parent(deps, run, now)
        if later is not None:
            return None, later
    return await _held_for_archive(deps, raw), None


async def _held_for_archive(deps: RunDeps, raw: dict[str, Any]) -> dict[str, Any] | None:
    """The run, holding the archive's finalizer while the archive is on (added on its first pass, before anything
    runs, or on the first pass after the archive was turned on): from then on it is deleted (pruned) only once the
    archive holds it. None: somebody wrote first (the run is looked at again)."""
    finalizer = deps.archive.finalizer
    if finalizer is None or finalizer in (raw["metadata"].get("finalizers") or ()):
        return raw
    try:
        return await hold_for_archive(deps.api, raw, finalizer)
    except Conflict:
        deps.memory.conflicted((raw["metadata"]["namespace"], raw["metadata"]["name"]))
        return None


async def act_and_keep_pods(deps: RunDeps, ref: RunRef, actions: Sequence[Action], now: datetime, *,
                            upkeep: bool, run_over: bool) -> datetime | None:
    """The decision's actions and the run's step pod upkeep (none for a run held in its queue or refused: it made
    no step objects); when a pod is due a look. Independent, so side by side: the pass waits for the longer of the
    two, not for both (each is a few requests in a row); both end before a failure is raised."""
    _, pod_check = await side_by_side((
        apply_actions(deps.actions, ref, actions),
        deps.children.keep_step_pods(ref.namespace, ref.name, now, run_over=run_over) if upkeep else _nothing(),
    ))
    return pod_check


async def _nothing() -> None:
    return None


async def snapshot_workflow(
    deps: RunDeps, run: WorkflowRun, status: WorkflowRunStatus, raw: dict[str, Any] | None
) -> tuple[WorkflowRunStatus, list[str]]:
    """Copy the Workflow's steps into the run once; a run in flight never sees later edits.

    `raw` is the run's Workflow as just read (None: it does not exist).
    """
    namespace = run.metadata["namespace"]
    workflow_name = run.spec.workflow_ref.name
    if run.spec.retry_of is not None:
        return await snapshot_retry(deps, run, status, raw)
    if raw is None:
        return status, [f"Workflow {workflow_name!r} does not exist in namespace {namespace}"]
    raw_spec = raw.get("spec") or {}
    step_types = await step_types_of(deps.api, deps.definitions, namespace, raw_spec)
    spec, errors = validate_workflow_manifest(raw_spec, catalog_of(deps.definitions, namespace, step_types))
    if spec is None or errors:
        listed = "; ".join(f"{e.field}: {e.message}" for e in errors[:5])
        return status, [f"Workflow {workflow_name!r} is not valid ({listed}); fix it and start a new run"]
    inherited: list[str] = []
    refused: list[str] = []
    if run.spec.trigger.type == "parent":
        refused, inherited = await child_run_problems(deps, run, raw)
    modules = [] if refused else await module_problems(deps.api, namespace, raw_spec)
    if modules:
        listed = "; ".join(modules[:5])
        refused = [f"a code.wasm module of Workflow {workflow_name!r} would be refused ({listed}); "
                   "fix it and start a new run"]
    if refused:
        return status, refused
    started = start_run(
        spec, int(raw["metadata"].get("generation", 0)), run.spec, workflow_uid=str(raw["metadata"].get("uid") or ""),
        step_types=step_types, subflows=await subflows_of(deps.api, namespace, spec),
    )
    if isinstance(started, list):
        return status, started
    snapshot, params = started
    updated = status.model_copy(deep=True)
    updated.workflow_spec = snapshot
    updated.params = params
    if run.spec.trigger.type == "parent":
        updated.earlier_requesters = inherited  # four eyes in the child refuses whoever it refuses in the parent
    return updated, []


async def snapshot_retry(
    deps: RunDeps, run: WorkflowRun, status: WorkflowRunStatus, workflow: dict[str, Any] | None
) -> tuple[WorkflowRunStatus, list[str]]:
    """A retry executes the finished run's snapshot; reused outputs come from that run's status only."""
    assert run.spec.retry_of is not None
    previous_name = run.spec.retry_of.run
    raw = await read_run(deps.api, run.metadata["namespace"], previous_name)
    if raw is None:
        return status, [f"spec.retryOf.run: run {previous_name!r} does not exist in this namespace"]
    previous = WorkflowRun.model_validate(raw)
    if workflow is None:
        return status, [f"Workflow {run.spec.workflow_ref.name!r} does not exist in this namespace"]
    inherited: list[str] = []
    if run.spec.trigger.type == "parent":  # a retried parent's child retrying its earlier child
        refused, inherited = await child_run_problems(deps, run, workflow, retried_uid=previous.metadata.get("uid"))
        if refused:
            return status, refused
    generation = int(workflow["metadata"].get("generation", 0))
    basis = await retry_basis(deps, run, previous.status or WorkflowRunStatus(), workflow)
    started = basis if isinstance(basis, list) else start_retry(
        run.spec, previous.spec.workflow_ref.name, previous.status or WorkflowRunStatus(), generation,
        workflow_uid=str(workflow["metadata"].get("uid") or ""), previous_params=previous.spec.params, basis=basis,
    )
    if isinstance(started, list):
        return status, started
    snapshot, params, reused, output_bytes = started
    refused = code_steps_refused(deps.definitions, run.metadata["namespace"], snapshot)
    if refused:
        return status, refused
    updated = status.model_copy(deep=True)
    updated.workflow_spec = snapshot
    updated.params = params
    updated.steps = reused
    updated.output_bytes = output_bytes
    updated.earlier_requesters = earlier_requesters(previous.spec.requested_by, previous.status or WorkflowRunStatus(),
                                                    also=inherited)
    updated.retried_children = await retried_children_of(deps, previous, snapshot, {entry.id for entry in reused})
    return updated, []


def code_steps_refused(definitions: Definitions, namespace: str, snapshot: WorkflowSnapshot) -> list[str]:
    """A retry runs an old snapshot again: its code steps too, only if they may run here now."""
    actions = {step.action for step in (*snapshot.steps, *snapshot.finally_, *snapshot.compensations) if step.action}
    code = {action for action in actions if definitions.catalog.is_code(action)}
    return definitions.code_steps.refusals(namespace, actions, code)


async def _write(deps: RunDeps, raw: dict[str, Any], status: WorkflowRunStatus, run: WorkflowRun) -> bool:
    """Write the status once; False when somebody wrote first (the run is requeued).

    `status` carries observedGeneration from `raw`; the write names raw's resourceVersion, so a spec
    change since (which raises the generation) makes it a conflict, never a stale claim.
    """
    try:
        written = await write_run_status(deps.api, raw, status.to_wire())
    except Conflict:
        # Somebody wrote first; the next pass re-reads and decides again.
        deps.memory.conflicted((raw["metadata"]["namespace"], raw["metadata"]["name"]))
        log.debug("status conflict on %s; requeued", raw["metadata"]["name"])
        return False
    if written is not None:
        # The answer is the run as written: the next pass takes this model instead of parsing the answer.
        parsed = run.model_copy(update={"metadata": written.get("metadata") or {}, "status": status})
        deps.memory.wrote((raw["metadata"]["namespace"], raw["metadata"]["name"]), written, parsed)
    return True
