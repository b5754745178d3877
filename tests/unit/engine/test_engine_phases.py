"""The one transition table: legal moves pass, everything else raises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import get_args

import pytest

from towline.api.run import StepStatus, WorkflowRunStatus
from towline.api.runterms import RunPhase, StepPhase
from towline.engine import (
    TERMINAL_RUN_PHASES,
    TERMINAL_STEP_PHASES,
    IllegalTransition,
    transition_run,
    transition_step,
)
from towline.engine.phases import RUN_PHASES, RUN_TRANSITIONS, STEP_PHASES, STEP_TRANSITIONS

NOW = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def test_run_moves_from_pending_to_running() -> None:
    status = WorkflowRunStatus()
    assert transition_run(status, "Running") is True
    assert status.phase == "Running"


@pytest.mark.parametrize("terminal", ["Succeeded", "Failed", "Cancelled"])
def test_finished_run_cannot_change_phase(terminal: str) -> None:
    status = WorkflowRunStatus(phase=terminal)
    for target in RUN_PHASES:
        if target != terminal:
            with pytest.raises(IllegalTransition):
                transition_run(status, target)


def test_run_never_returns_to_pending() -> None:
    with pytest.raises(IllegalTransition, match="Running -> Pending"):
        transition_run(WorkflowRunStatus(phase="Running"), "Pending")


def test_pending_run_cannot_jump_to_awaiting_approval() -> None:
    with pytest.raises(IllegalTransition):
        transition_run(WorkflowRunStatus(), "AwaitingApproval")


def test_staying_in_the_same_run_phase_is_not_a_transition() -> None:
    status = WorkflowRunStatus(phase="Waiting")
    assert transition_run(status, "Waiting") is False


def test_step_transition_records_its_reason() -> None:
    step = StepStatus(id="a")
    transition_step(step, "Skipped", at=NOW, reason="ConditionFalse")
    assert (step.phase, step.reason) == ("Skipped", "ConditionFalse")


@pytest.mark.parametrize("terminal", ["Succeeded", "Skipped", "Cancelled"])
def test_finished_step_cannot_change_phase(terminal: str) -> None:
    for target in STEP_PHASES:
        with pytest.raises(IllegalTransition):
            transition_step(StepStatus(id="a", phase=terminal), target, at=NOW)


def test_failed_step_is_retried_only_when_paused_for_credentials() -> None:
    with pytest.raises(IllegalTransition, match="credential repair"):
        transition_step(StepStatus(id="a", phase="Failed"), "Retrying", at=NOW)
    paused = StepStatus(id="a", phase="Failed", paused_for_credentials=True)
    transition_step(paused, "Retrying", at=NOW)
    assert paused.phase == "Retrying"


def test_step_cannot_move_to_its_own_phase() -> None:
    with pytest.raises(IllegalTransition):
        transition_step(StepStatus(id="a", phase="Running"), "Running", at=NOW)


def test_table_covers_every_phase_of_the_api_types() -> None:
    assert set(RUN_TRANSITIONS) == set(get_args(RunPhase))
    assert set(STEP_TRANSITIONS) == set(get_args(StepPhase))
    assert all(targets <= set(get_args(RunPhase)) for targets in RUN_TRANSITIONS.values())
    assert all(targets <= set(get_args(StepPhase)) for targets in STEP_TRANSITIONS.values())
    assert (set(RUN_PHASES), set(STEP_PHASES)) == (set(get_args(RunPhase)), set(get_args(StepPhase)))


def test_terminal_phases_come_from_the_table() -> None:
    assert {"Succeeded", "Failed", "Cancelled"} == TERMINAL_RUN_PHASES
    assert {"Succeeded", "Failed", "Skipped", "Cancelled"} == TERMINAL_STEP_PHASES


def test_entering_running_starts_an_attempt() -> None:
    step = StepStatus(id="a", phase="Retrying", finished_at=NOW - timedelta(minutes=1))
    transition_step(step, "Running", at=NOW)
    assert (step.started_at, step.finished_at) == (NOW, None)


@pytest.mark.parametrize("to", ["Succeeded", "Failed", "Retrying", "Cancelled"])
def test_leaving_running_finishes_the_attempt(to: StepPhase) -> None:
    step = StepStatus(id="a", phase="Running", started_at=NOW - timedelta(minutes=1))
    transition_step(step, to, at=NOW)
    assert (step.started_at, step.finished_at) == (NOW - timedelta(minutes=1), NOW)


@pytest.mark.parametrize("to", ["Skipped", "Failed", "Cancelled"])
def test_a_step_that_never_ran_finishes_without_starting(to: StepPhase) -> None:
    step = StepStatus(id="a")
    transition_step(step, to, at=NOW, message="not run")
    assert (step.started_at, step.finished_at, step.message) == (None, NOW, "not run")


def test_resuming_a_paused_step_keeps_the_time_its_attempt_failed() -> None:
    failed_at = NOW - timedelta(hours=1)
    step = StepStatus(id="a", phase="Failed", paused_for_credentials=True, finished_at=failed_at, message="401")
    transition_step(step, "Retrying", at=NOW, reason="CredentialsRepaired")
    assert (step.finished_at, step.message, step.reason) == (failed_at, "401", "CredentialsRepaired")


def test_a_long_message_is_clipped_to_fit_the_status() -> None:
    step = StepStatus(id="a")
    transition_step(step, "Skipped", at=NOW, message="x" * 5000)
    assert step.message is not None and len(step.message) == 2048
