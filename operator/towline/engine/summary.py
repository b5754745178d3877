"""The run-level view of a pass: its active phase, conditions, current steps and wake-up time.

Conditions follow the Kubernetes convention Knative and Tekton use for runs:
`Succeeded` is Unknown while the run is in flight and True or False at the
end; `Suspended`, `CredentialsNeedRepair` and `NeedsReconciliation` say what a
person may need to do. A condition's lastTransitionTime changes only when its
status does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from towline.api.common import Condition, ConditionStatus
from towline.api.run import WorkflowRunStatus
from towline.api.runterms import RunPhase
from towline.engine.state import RunState

CURRENT_STEP_LIMIT = 256

_PHASE_BY_PRIORITY: tuple[tuple[str, RunPhase], ...] = (
    ("job", "Running"), ("approval", "AwaitingApproval"), ("wait", "Waiting"), ("retry", "RetryScheduled"),
)
"""A run with a Job running is Running; otherwise it shows what a person would wait for first."""


def set_condition(
    status: WorkflowRunStatus, kind: str, value: ConditionStatus, *, reason: str, message: str, now: datetime
) -> None:
    message = message if len(message) <= 4096 else message[:4095] + "…"
    for position, existing in enumerate(status.conditions):
        if existing.type != kind:
            continue
        if (existing.status, existing.reason, existing.message) == (value, reason, message):
            return
        since = existing.last_transition_time if existing.status == value else now
        status.conditions[position] = Condition(
            type=kind, status=value, reason=reason, message=message, last_transition_time=since,
        )
        return
    status.conditions.append(
        Condition(type=kind, status=value, reason=reason, message=message, last_transition_time=now)
    )


def has_condition(status: WorkflowRunStatus, kind: str, value: ConditionStatus) -> bool:
    return any(c.type == kind and c.status == value for c in status.conditions)


@dataclass(frozen=True)
class ActiveSummary:
    """One scan over the steps of a run that is still in flight."""

    phase: RunPhase
    current: list[str]
    wake_at: datetime | None
    paused: list[str]
    paused_secrets: list[str]


def summarize(state: RunState, *, suspended: bool, now: datetime) -> ActiveSummary:
    """The run's active phase: Running if a Job runs, else AwaitingApproval, Waiting, RetryScheduled."""
    kinds: set[str] = set()
    current: list[str] = []
    paused: list[str] = []
    secrets: set[str] = set()
    wakes: list[datetime | None] = []
    for entry in state.status.steps:
        if entry.loop is not None:
            continue  # a loop is where its instances are
        if entry.phase == "Running":
            current.append(entry.id)
            if entry.job_name is not None or entry.child_run is not None:  # a subflow runs as long as its child
                kinds.add("job")
            elif entry.approval_name is not None:
                kinds.add("approval")
                wakes.append(entry.expires_at)
            else:
                kinds.add("wait")
                wakes.append(entry.wake_at)
        elif entry.phase == "Retrying":
            kinds.add("retry")
            wakes.append(None if suspended else entry.retry_at)
        elif entry.phase == "Failed" and entry.paused_for_credentials:
            paused.append(entry.id)
            secrets.update(entry.credentials_used)
    if not state.main_finished():
        wakes.append(state.deadline())
    if paused or suspended:
        kinds.add("wait")
    phase_now: RunPhase = next((phase for kind, phase in _PHASE_BY_PRIORITY if kind in kinds), "Running")
    # What is already due was handled in this pass, or waits for a Job to finish or the run to resume,
    # which wake the operator anyway: only future times are worth a timer.
    future = [moment for moment in wakes if moment is not None and moment > now]
    return ActiveSummary(phase_now, current, min(future) if future else None, paused, sorted(secrets))


def current_step_text(ids: list[str]) -> str | None:
    """Comma-joined ids for `kubectl get`, cut to fit the field with a count of the rest."""
    if not ids:
        return None
    text = ",".join(ids)
    if len(text) <= CURRENT_STEP_LIMIT:
        return text
    shown: list[str] = []
    for index, step_id in enumerate(ids):
        rest = f",+{len(ids) - index} more"
        if len(",".join([*shown, step_id])) + len(rest) > CURRENT_STEP_LIMIT:
            return ",".join(shown) + rest
        shown.append(step_id)
    return ",".join(shown)


def phase_message(summary: ActiveSummary) -> str:
    if summary.phase == "AwaitingApproval":
        return f"awaiting approval: {', '.join(summary.current)}"
    if summary.paused:
        return f"paused for credential repair: {', '.join(summary.paused)}"
    if summary.current:
        return f"running: {', '.join(summary.current)}"
    if summary.phase == "RetryScheduled":
        return "waiting to retry"
    return "in progress"
