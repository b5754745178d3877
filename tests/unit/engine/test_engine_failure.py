"""`onFailure: continue`, compensation steps, and `finally` steps."""

from __future__ import annotations

from engine_harness import Sim, action, workflow


def test_on_failure_continue_lets_dependants_run_and_the_run_succeed() -> None:
    sim = Sim(workflow([action("a", onFailure="continue"), action("b", "a")]))
    sim.reconcile()
    sim.fail("a")
    sim.reconcile()
    assert sim.phase_of("b") == "Running"
    sim.finish("b")
    sim.reconcile()
    assert sim.phase == "Succeeded"
    assert "onFailure continue: a" in (sim.status.message or "")


def test_dependant_of_a_continued_step_can_read_its_error_class() -> None:
    sim = Sim(workflow([action("a", onFailure="continue"), action("b", "a", when="steps.a.errorClass == 'permanent'")]))
    sim.reconcile()
    sim.fail("a", "permanent")
    sim.reconcile()
    assert sim.phase_of("b") == "Running"


def test_compensation_runs_after_the_failure_then_the_run_fails_compensated() -> None:
    spec = workflow(
        [action("charge", onFailure="refund"), action("ship", "charge")],
        compensations=[action("refund", **{"with": {"why": "${{ steps.charge.errorClass }}"}})],
    )
    sim = Sim(spec)
    sim.reconcile()
    sim.fail("charge", "permanent")
    sim.reconcile()
    assert sim.phase_of("ship") == "Skipped"
    assert sim.started() == ["charge", "refund"] and sim.created[-1].inputs == {"why": "permanent"}
    sim.finish("refund")
    sim.reconcile()
    assert sim.phase == "Failed"
    assert sim.condition("Succeeded").reason == "Compensated"


def test_compensation_is_not_run_when_nothing_fails() -> None:
    spec = workflow([action("charge", onFailure="refund")], compensations=[action("refund")])
    sim = Sim(spec)
    sim.succeed_all()
    assert sim.phase == "Succeeded" and sim.started() == ["charge"]
    assert "refund" not in [s.id for s in sim.status.steps]


def test_compensation_runs_once_when_two_failed_steps_name_it() -> None:
    spec = workflow([action("a", onFailure="undo"), action("b", onFailure="undo")], compensations=[action("undo")])
    sim = Sim(spec)
    sim.reconcile()
    sim.fail("a")
    sim.fail("b")
    sim.reconcile()
    assert sim.started().count("undo") == 1


def test_failed_compensation_fails_the_run_as_compensation_failed() -> None:
    spec = workflow([action("a", onFailure="undo")], compensations=[action("undo")])
    sim = Sim(spec)
    sim.reconcile()
    sim.fail("a")
    sim.reconcile()
    sim.fail("undo")
    sim.reconcile()
    assert sim.phase == "Failed" and sim.condition("Succeeded").reason == "CompensationFailed"


def test_finally_steps_run_after_the_dag_succeeds() -> None:
    sim = Sim(workflow([action("a"), action("b", "a")], **{"finally": [action("tell_ops")]}))
    sim.reconcile()
    sim.finish("a")
    sim.reconcile()
    assert "tell_ops" not in sim.started()
    sim.finish("b")
    sim.reconcile()
    assert sim.started()[-1] == "tell_ops" and sim.phase == "Running"
    sim.finish("tell_ops")
    sim.reconcile()
    assert sim.phase == "Succeeded"


def test_finally_steps_run_after_a_failure_and_the_run_stays_failed() -> None:
    sim = Sim(workflow([action("a")], **{"finally": [action("cleanup")]}))
    sim.reconcile()
    sim.fail("a")
    sim.reconcile()
    assert sim.started() == ["a", "cleanup"]
    sim.finish("cleanup")
    sim.reconcile()
    assert sim.phase == "Failed" and sim.condition("Succeeded").reason == "StepFailed"


def test_finally_step_that_itself_fails_fails_the_run() -> None:
    sim = Sim(workflow([action("a")], **{"finally": [action("notify"), action("archive")]}))
    sim.reconcile()
    sim.finish("a")
    sim.reconcile()
    sim.fail("notify", message="slack is down")
    sim.finish("archive")
    sim.reconcile()
    assert sim.phase == "Failed"
    succeeded = sim.condition("Succeeded")
    assert succeeded.reason == "FinallyFailed" and "slack is down" in succeeded.message
    assert sim.phase_of("archive") == "Succeeded"


def test_finally_steps_see_the_outcome_as_run_phase() -> None:
    spec = workflow(
        [action("a")],
        **{"finally": [action("tell_ops", **{"with": {"text": "${{ run.name }} ${{ run.phase }}"}})]},
    )
    sim = Sim(spec)
    sim.reconcile()
    sim.fail("a")
    sim.reconcile()
    assert sim.created[-1].inputs == {"text": f"{sim.name} Failed"}


def test_finally_steps_follow_their_own_needs() -> None:
    sim = Sim(workflow([action("a")], **{"finally": [action("f1"), action("f2", "f1", "a")]}))
    sim.reconcile()
    sim.fail("a")
    sim.reconcile()
    assert sim.started() == ["a", "f1"]
    sim.finish("f1")
    sim.reconcile()
    assert sim.started()[-1] == "f2"


def test_finally_step_may_continue_on_failure() -> None:
    sim = Sim(workflow([action("a")], **{"finally": [action("f", onFailure="continue")]}))
    sim.reconcile()
    sim.finish("a")
    sim.reconcile()
    sim.fail("f")
    sim.reconcile()
    assert sim.phase == "Succeeded"
