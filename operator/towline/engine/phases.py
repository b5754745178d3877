"""The one transition table for run and step phases.

Every phase change in the engine goes through `transition_run` or
`transition_step`; a change the table does not allow is a bug in the engine
and raises `IllegalTransition` rather than sneaking into a status that
production side effects depend on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import get_args

from towline.api.run import StepStatus, WorkflowRunStatus
from towline.api.runterms import TERMINAL_RUN_PHASES, RunPhase, StepPhase
from towline.text import clip

RUN_PHASES: tuple[RunPhase, ...] = get_args(RunPhase)
STEP_PHASES: tuple[StepPhase, ...] = get_args(StepPhase)

_ACTIVE_RUN: frozenset[RunPhase] = frozenset(RUN_PHASES) - {"Pending"} - TERMINAL_RUN_PHASES

# One decide() pass may go Waiting -> (Running) -> AwaitingApproval without
# writing the middle phase, so the active phases move freely among themselves.
RUN_TRANSITIONS: Mapping[RunPhase, frozenset[RunPhase]] = {
    # Failed straight from Pending: the run could not start (bad params, invalid snapshot).
    # Cancelled straight from Pending: cancelled while queued under policy.maxConcurrentRuns.
    "Pending": frozenset({"Running", "Failed", "Cancelled"}),
    **{phase: (_ACTIVE_RUN - {phase}) | TERMINAL_RUN_PHASES for phase in _ACTIVE_RUN},
    **{phase: frozenset() for phase in TERMINAL_RUN_PHASES},
}

STEP_TRANSITIONS: Mapping[StepPhase, frozenset[StepPhase]] = {
    # Failed from Pending: a `when` or binding that cannot be evaluated, or the run deadline.
    "Pending": frozenset({"Running", "Skipped", "Failed", "Cancelled"}),
    "Running": frozenset({"Succeeded", "Failed", "Retrying", "Cancelled"}),
    "Retrying": frozenset({"Running", "Failed", "Cancelled"}),
    # Only a step paused for credential repair leaves Failed: a person resumed the run.
    "Failed": frozenset({"Retrying"}),
    "Succeeded": frozenset(),
    "Skipped": frozenset(),
    "Cancelled": frozenset(),
}

_STEP_GUARDS: Mapping[tuple[StepPhase, StepPhase], tuple[Callable[[StepStatus], bool], str]] = {
    ("Failed", "Retrying"): (
        lambda step: step.paused_for_credentials,
        "only a step paused for credential repair is retried after failing",
    ),
}

TERMINAL_STEP_PHASES: frozenset[StepPhase] = frozenset(
    phase for phase, targets in STEP_TRANSITIONS.items() if all((phase, to) in _STEP_GUARDS for to in targets)
)
"""Phases a step leaves only through a guarded move (Failed, for a step paused for credential repair)."""


class IllegalTransition(RuntimeError):  # noqa: N818 - the name the operator and tests use
    """The engine tried a phase change the transition table forbids: a bug, never a user error."""


def transition_run(status: WorkflowRunStatus, to: RunPhase) -> bool:
    """Move the run to `to`; staying in the same phase is a no-op. True when the phase changed."""
    current = status.phase
    if current == to:
        return False
    if to not in RUN_TRANSITIONS[current]:
        raise IllegalTransition(f"run phase {current} -> {to} is not allowed")
    status.phase = to
    return True


def transition_step(
    step: StepStatus, to: StepPhase, *, at: datetime, reason: str | None = None, message: str | None = None
) -> None:
    """Move one step to `to` at `at`, recording why; every step phase change goes through here.

    It keeps the step's times, so no caller does: entering Running starts an
    attempt (`startedAt`, `finishedAt` cleared); leaving Running or reaching a
    terminal phase sets `finishedAt`. `reason` always replaces the old one;
    `message`, when given, replaces the old message (clipped to fit the status).
    """
    current = step.phase
    if to not in STEP_TRANSITIONS[current]:
        raise IllegalTransition(f"step {step.id}: phase {current} -> {to} is not allowed")
    guard = _STEP_GUARDS.get((current, to))
    if guard is not None and not guard[0](step):
        raise IllegalTransition(f"step {step.id}: phase {current} -> {to}: {guard[1]}")
    if to == "Running":
        step.started_at, step.finished_at = at, None
    elif current == "Running" or to in TERMINAL_STEP_PHASES:
        step.finished_at = at
    step.phase = to
    step.reason = reason
    if message is not None:
        step.message = clip(message, 2048)


def is_finished_step(step: StepStatus) -> bool:
    """Terminal, and not waiting for a person to repair credentials and resume it."""
    return step.phase in TERMINAL_STEP_PHASES and not step.paused_for_credentials
