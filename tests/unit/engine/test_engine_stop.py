"""spec.stop (argo terminate): the run ends at once, without its finally steps or compensations."""

from __future__ import annotations

from engine_harness import Sim, action, workflow
from test_engine_subflows import SubflowSim, call

from towline.engine import DeleteJob, job_name
from towline.engine.actions import CloseApproval, CreateStepJob, SetChildRun


def test_stop_deletes_the_running_job_and_never_starts_finally() -> None:
    sim = Sim(workflow([action("a"), action("b", "a")], **{"finally": [action("cleanup")]}))
    sim.reconcile()
    sim.set_spec(stop=True)
    sim.reconcile()
    assert sim.of_type(DeleteJob) == [DeleteJob(job_name(sim.name, "a", 1))]
    assert sim.started() == ["a"]
    assert [sim.phase_of(s) for s in ("a", "b", "cleanup")] == ["Cancelled", "Skipped", "Skipped"]
    assert sim.phase == "Cancelled" and sim.condition("Succeeded").reason == "Stopped"
    assert sim.events("RunStopped")
    sim.reconcile()
    assert sim.started() == ["a"]


def test_stop_ends_finally_steps_already_running() -> None:
    sim = Sim(workflow([action("a")], **{"finally": [action("cleanup")]}))
    sim.reconcile()
    sim.set_spec(cancel=True)
    sim.reconcile()
    assert sim.started() == ["a", "cleanup"] and sim.phase == "Running"
    sim.set_spec(cancel=True, stop=True)
    sim.reconcile()
    assert DeleteJob(job_name(sim.name, "cleanup", 1)) in sim.of_type(DeleteJob)
    assert sim.phase_of("cleanup") == "Cancelled" and sim.step("cleanup").reason == "Stopped"
    assert sim.phase == "Cancelled" and sim.condition("Succeeded").reason == "Stopped"


def test_stop_starts_no_compensation() -> None:
    spec = workflow([action("charge", onFailure="refund"), action("ship")], compensations=[action("refund")])
    sim = Sim(spec)
    sim.reconcile()
    sim.fail("charge", "permanent")
    sim.set_spec(stop=True)
    sim.reconcile()
    assert "refund" not in sim.started()
    assert sim.phase == "Cancelled" and sim.condition("Succeeded").reason == "Stopped"


def test_stop_closes_an_open_approval() -> None:
    sim = Sim(workflow([{"id": "review", "approval": {}}, action("go", "review")]))
    sim.reconcile()
    assert sim.phase == "AwaitingApproval"
    sim.set_spec(stop=True)
    sim.reconcile()
    closes = sim.of_type(CloseApproval)
    assert len(closes) == 1 and closes[0].phase == "Cancelled"
    assert sim.phase_of("review") == "Cancelled" and sim.phase_of("go") == "Skipped"
    assert not [a for a in sim.of_type(CreateStepJob) if a.step_id == "go"]


def test_stop_wins_over_suspend() -> None:
    sim = Sim(workflow([action("a")], **{"finally": [action("cleanup")]}))
    sim.reconcile()
    sim.set_spec(suspend=True, stop=True)
    sim.reconcile()
    assert sim.started() == ["a"] and sim.phase == "Cancelled"
    assert sim.condition("Succeeded").reason == "Stopped"


def test_stopping_the_parent_stops_the_child() -> None:
    sim = SubflowSim(workflow([call("change")], **{"finally": [action("cleanup")]}))
    sim.reconcile()
    sim.child("change", "Running")
    sim.set_spec(stop=True)
    sim.reconcile()
    assert SetChildRun(sim.step("change").child_run or "", cancel=True, stop=True) in sim.of_type(SetChildRun)
    assert sim.phase_of("change") == "Cancelled" and sim.started() == []
