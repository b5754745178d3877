"""Cancel and suspend from the run's spec, and the run deadline."""

from __future__ import annotations

from datetime import timedelta

from engine_harness import T0, Sim, action, workflow

from towline.engine import DeleteJob, job_name


def test_cancel_deletes_running_jobs_and_cancels_unfinished_steps() -> None:
    sim = Sim(workflow([action("a"), action("b"), action("c", "a")]))
    sim.reconcile()
    sim.finish("b")
    sim.set_spec(cancel=True)
    sim.reconcile()
    assert sim.of_type(DeleteJob) == [DeleteJob(job_name(sim.name, "a", 1))]
    assert [sim.phase_of(s) for s in "abc"] == ["Cancelled", "Succeeded", "Cancelled"]
    assert sim.phase == "Cancelled" and sim.condition("Succeeded").reason == "Cancelled"


def test_cancelled_run_runs_its_finally_steps_then_ends_cancelled() -> None:
    sim = Sim(workflow([action("a")], **{"finally": [action("cleanup")]}))
    sim.reconcile()
    sim.set_spec(cancel=True)
    sim.reconcile()
    assert sim.started() == ["a", "cleanup"] and sim.phase == "Running"
    sim.finish("cleanup")
    sim.reconcile()
    assert sim.phase == "Cancelled"
    assert sim.events("RunCancelled")


def test_cancel_stops_a_pending_retry() -> None:
    sim = Sim(workflow([action("a", retry={"limit": 3})]))
    sim.reconcile()
    sim.fail("a", "transient")
    sim.reconcile()
    sim.set_spec(cancel=True)
    sim.reconcile()
    assert sim.phase_of("a") == "Cancelled" and sim.phase == "Cancelled" and len(sim.created) == 1


def test_cancel_wins_over_suspend() -> None:
    sim = Sim(workflow([action("a")], **{"finally": [action("cleanup")]}))
    sim.reconcile()
    sim.set_spec(suspend=True, cancel=True)
    sim.reconcile()
    assert sim.started() == ["a", "cleanup"]


def test_suspend_starts_nothing_new_but_running_jobs_finish() -> None:
    sim = Sim(workflow([action("a"), action("b", "a")]))
    sim.reconcile()
    sim.set_spec(suspend=True)
    sim.reconcile()
    sim.finish("a")
    sim.reconcile()
    assert sim.phase_of("a") == "Succeeded" and sim.started() == ["a"]
    assert sim.phase == "Waiting"
    condition = sim.condition("Suspended")
    assert (condition.status, condition.reason) == ("True", "Suspended")


def test_resume_after_suspend_starts_what_became_ready() -> None:
    sim = Sim(workflow([action("a"), action("b", "a")]))
    sim.reconcile()
    sim.set_spec(suspend=True)
    sim.finish("a")
    sim.reconcile()
    sim.set_spec(suspend=False)
    sim.reconcile()
    assert sim.started() == ["a", "b"]
    assert sim.condition("Suspended").status == "False"
    assert sim.events("RunResumed")


def test_suspended_run_does_not_start_due_retries() -> None:
    sim = Sim(workflow([action("a", retry={"limit": 3, "backoff": "fixed"})]))
    sim.reconcile()
    sim.fail("a", "transient")
    sim.reconcile()
    sim.set_spec(suspend=True)
    sim.advance(60)
    sim.reconcile()
    assert len(sim.created) == 1 and sim.phase_of("a") == "Retrying"


def test_run_deadline_stops_jobs_fails_the_run_and_still_runs_finally() -> None:
    sim = Sim(workflow([action("a"), action("b", "a")], policy={"runTimeoutSeconds": 600},
                       **{"finally": [action("cleanup")]}))
    first = sim.reconcile()
    assert first.wake_at == T0 + timedelta(seconds=600)
    sim.advance(600)
    sim.reconcile()
    assert sim.of_type(DeleteJob) == [DeleteJob(job_name(sim.name, "a", 1))]
    a, b = sim.step("a"), sim.step("b")
    assert (a.phase, a.error_class, a.reason) == ("Failed", "timeout", "RunTimeout")
    assert (b.phase, b.reason) == ("Skipped", "RunTimeout")
    assert sim.started()[-1] == "cleanup"
    sim.finish("cleanup")
    sim.reconcile()
    assert sim.phase == "Failed" and sim.condition("Succeeded").reason == "RunTimeout"
    assert sim.events("RunDeadlineExceeded")


def test_run_deadline_does_not_stop_finally_steps() -> None:
    sim = Sim(workflow([action("a")], policy={"runTimeoutSeconds": 60}, **{"finally": [action("cleanup")]}))
    sim.reconcile()
    sim.finish("a")
    sim.reconcile()
    sim.advance(120)
    sim.reconcile()
    assert sim.phase_of("cleanup") == "Running" and sim.of_type(DeleteJob) == []


def test_run_deadline_gives_up_a_credential_pause() -> None:
    sim = Sim(workflow([action("a")], policy={"runTimeoutSeconds": 60}))
    sim.reconcile()
    sim.fail("a", "auth")
    sim.reconcile()
    sim.advance(60)
    sim.reconcile()
    assert not sim.step("a").paused_for_credentials and sim.phase == "Failed"
    assert sim.condition("CredentialsNeedRepair").status == "False"
