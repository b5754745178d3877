"""Say on the run what keeps failing once the queue has given up retrying it.

A run whose reconcile fails over and over (a name the API server rejects, a
status the engine refuses) gets a `ReconcileFailing` condition and one Warning
Event naming the error; the condition turns False on the next pass that
succeeds. Error texts are the API server's or the engine's words, clipped;
never a Secret value (no code path here reads one).
"""

from __future__ import annotations

import logging
from datetime import datetime

import pydantic

from towline.api.run import WorkflowRunStatus
from towline.engine import TERMINAL_RUN_PHASES
from towline.engine.kstatus import RECONCILE_FAILING, kstatus_fields
from towline.engine.summary import has_condition, set_condition
from towline.handlers.context import RunDeps
from towline.k8s.actions import emit_event
from towline.k8s.client import ApiError
from towline.k8s.objects import RunRef
from towline.k8s.runs import read_run, write_run_status
from towline.text import clip

log = logging.getLogger(__name__)


def describe_failure(error: BaseException) -> str:
    """The error in words fit for a condition: for a validation error, where and what, never the input."""
    if isinstance(error, pydantic.ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}" for problem in error.errors()[:5]
        )
        return f"the run's object does not validate ({problems})"
    return clip(f"{type(error).__name__}: {error}", 512) or type(error).__name__


def failure_message(attempts: int, error: BaseException) -> str:
    return (
        f"{attempts} reconcile passes in a row failed; the last with {describe_failure(error)}. The operator "
        "stops retrying until the run or one of its objects changes."
    )


async def report_reconcile_failure(
    deps: RunDeps, namespace: str, name: str, attempts: int, error: BaseException
) -> None:
    """Set the condition and emit the Event, once: a second report of the same failure writes nothing."""
    raw = await read_run(deps.api, namespace, name)
    if raw is None:
        return
    message = failure_message(attempts, error)
    now = deps.now()
    meta = raw["metadata"]
    ref = RunRef(name=name, namespace=namespace, uid=meta["uid"],
                 workflow=str((raw.get("spec") or {}).get("workflowRef", {}).get("name", "")))
    try:
        status = WorkflowRunStatus.model_validate(raw.get("status") or {})
    except pydantic.ValidationError:
        # The status itself is what fails; the Event is the only place left to say so.
        await emit_event(deps.actions, ref, "Warning", RECONCILE_FAILING, message)
        return
    if status.phase in TERMINAL_RUN_PHASES or has_condition(status, RECONCILE_FAILING, "True"):
        return
    status.conditions = list(status.conditions)
    set_condition(status, RECONCILE_FAILING, "True", reason="RetryBudgetExhausted", message=message, now=now)
    status = kstatus_fields(status, meta.get("generation"), now)
    try:
        await write_run_status(deps.api, raw, status.to_wire())
    except ApiError as write_error:
        log.warning("%s/%s: could not record the reconcile failure: %s", namespace, name, write_error)
    await emit_event(deps.actions, ref, "Warning", RECONCILE_FAILING, message)


def clear_reconcile_failure(status: WorkflowRunStatus, now: datetime) -> None:
    """A pass that got this far succeeded: a standing `ReconcileFailing` turns False."""
    if has_condition(status, RECONCILE_FAILING, "True"):
        status.conditions = list(status.conditions)
        set_condition(status, RECONCILE_FAILING, "False", reason="Reconciled",
                      message="the last reconcile pass succeeded", now=now)
