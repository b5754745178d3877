"""The fields kstatus reads on any object, derived from the run's own status. Pure.

Tools built on kstatus (sigs.k8s.io/cli-utils: Flux, kpt, Config Sync, `kubectl` apply waiters)
never look at `phase` or `Succeeded`. They read, in this order: `status.observedGeneration`
against `metadata.generation` (different: InProgress), then a `Reconciling` condition that is True
(InProgress) or a `Stalled` one that is True (Failed), and without either they call the object
Current. So every status write carries:

- `observedGeneration`: the generation the status was decided from (cancel and suspend raise it);
- `Reconciling`: True while the run is unfinished, False once it ends;
- `Stalled`: True when the run ended without succeeding (Failed or Cancelled) or when the operator
  gave up retrying a pass (`ReconcileFailing`); False otherwise. Never True together with Reconciling;
- `duration`: set only once the run has finished, so no column shows a figure that is already stale.

A succeeded run therefore reads Current, a failed or cancelled one Failed, one in flight InProgress.
Derived here in one place from what the engine decided, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from towline.api.run import WorkflowRunStatus
from towline.api.runterms import TERMINAL_RUN_PHASES
from towline.engine.summary import has_condition, set_condition
from towline.text import clip, elapsed
from towline.validation.conditions import STALLED

RECONCILING = "Reconciling"
RECONCILE_FAILING = "ReconcileFailing"
"""Set by the handlers when passes keep failing (towline.handlers.failures)."""


def run_duration(status: WorkflowRunStatus) -> str | None:
    """startedAt to finishedAt of a finished run; None while it runs or when it never started."""
    if status.phase not in TERMINAL_RUN_PHASES or status.started_at is None or status.finished_at is None:
        return None
    return elapsed((status.finished_at - status.started_at).total_seconds())


def kstatus_fields(status: WorkflowRunStatus, generation: int | None, now: datetime) -> WorkflowRunStatus:
    """`status` with observedGeneration, Reconciling, Stalled and duration as the rules above say.

    A finished run's two conditions date from its finishedAt (also when an older run gets them later).
    """
    updated = status.model_copy()
    updated.conditions = list(status.conditions)
    updated.observed_generation = generation
    updated.duration = run_duration(status)
    message = status.message or status.phase
    if status.phase in TERMINAL_RUN_PHASES:
        since = status.finished_at or now
        set_condition(updated, RECONCILING, "False", reason=status.phase, message="the run has finished", now=since)
        if status.phase == "Succeeded":
            set_condition(updated, STALLED, "False", reason=status.phase, message="the run succeeded", now=since)
        else:
            set_condition(updated, STALLED, "True", reason=_outcome_reason(status), message=message, now=since)
    elif has_condition(status, RECONCILE_FAILING, "True"):
        failing = next(c for c in status.conditions if c.type == RECONCILE_FAILING and c.status == "True")
        set_condition(updated, RECONCILING, "False", reason=RECONCILE_FAILING,
                      message="the operator stopped retrying this run", now=now)
        set_condition(updated, STALLED, "True", reason=RECONCILE_FAILING, message=failing.message, now=now)
    else:
        set_condition(updated, RECONCILING, "True", reason=status.phase, message=clip(message, 2048) or "", now=now)
        set_condition(updated, STALLED, "False", reason=status.phase, message="the run has not finished", now=now)
    return updated


def _outcome_reason(status: WorkflowRunStatus) -> str:
    """The Succeeded condition's reason (StepFailed, Cancelled, InvalidRun, …), else the phase."""
    for condition in status.conditions:
        if condition.type == "Succeeded" and condition.status == "False":
            return condition.reason
    return status.phase


def kstatus_fields_lag(status: Mapping[str, Any], generation: object) -> bool:
    """Whether a stored status (wire form) lacks what `kstatus_fields` writes for this generation.

    For finished runs, which otherwise get no pass: a spec change after the end (a late cancel) or a
    run an older operator finished is written once; the write's own watch event then reads as current.
    """
    conditions = status.get("conditions") or []
    return status.get("observedGeneration") != generation or not any(
        isinstance(c, Mapping) and c.get("type") == STALLED for c in conditions
    )
