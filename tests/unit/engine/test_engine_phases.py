"""The one transition table: legal moves pass, everything else raises."""

from __future__ import annotations

import pytest

from towline.api.run import StepStatus, WorkflowRunStatus
from towline.engine import IllegalTransition, transition_run, transition_step
from towline.engine.phases import RUN_PHASES, RUN_TRANSITIONS, STEP_PHASES, STEP_TRANSITIONS


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
    transition_step(step, "Skipped", reason="ConditionFalse")
    assert (step.phase, step.reason) == ("Skipped", "ConditionFalse")


@pytest.mark.parametrize("terminal", ["Succeeded", "Skipped", "Cancelled"])
def test_finished_step_cannot_change_phase(terminal: str) -> None:
    for target in STEP_PHASES:
        with pytest.raises(IllegalTransition):
            transition_step(StepStatus(id="a", phase=terminal), target)


def test_failed_step_is_retried_only_when_paused_for_credentials() -> None:
    with pytest.raises(IllegalTransition, match="credential repair"):
        transition_step(StepStatus(id="a", phase="Failed"), "Retrying")
    paused = StepStatus(id="a", phase="Failed", paused_for_credentials=True)
    transition_step(paused, "Retrying")
    assert paused.phase == "Retrying"


def test_step_cannot_move_to_its_own_phase() -> None:
    with pytest.raises(IllegalTransition):
        transition_step(StepStatus(id="a", phase="Running"), "Running")


def test_table_covers_every_phase() -> None:
    assert set(RUN_TRANSITIONS) == set(RUN_PHASES)
    assert set(STEP_TRANSITIONS) == set(STEP_PHASES)
