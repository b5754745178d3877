"""A Job whose pod can never start (it waits for a missing Secret) is deleted by `decide`.

Its pod would otherwise start once somebody creates the Secret, and run the step a
second time beside the attempt that replaces it.
"""

from __future__ import annotations

from engine_harness import Sim, action, workflow

from towline.engine import DeleteJob, job_name
from towline.engine.observed import REASON_UNMOUNTABLE


def stuck(sim: Sim, step_id: str) -> None:
    sim.fail(step_id, "auth", "Secret 'crm-api' does not exist", retryable=False, reason=REASON_UNMOUNTABLE)


def test_the_stuck_job_goes_once_the_status_records_its_failure() -> None:
    sim = Sim(workflow([action("load")]))
    sim.reconcile()
    stuck(sim, "load")
    first = sim.reconcile()
    assert sim.step("load").paused_for_credentials
    # Not yet: had the operator crashed after deleting it but before writing this status, the
    # next pass would find the Job gone and could no longer tell why the attempt failed.
    assert not any(isinstance(a, DeleteJob) for a in first.actions)
    second = sim.reconcile()
    assert second.actions[0] == DeleteJob(job_name("renewal-watch-1", "load", 1))
    assert sim.jobs == {}


def test_a_resume_deletes_the_stuck_job_before_the_next_attempt_starts() -> None:
    sim = Sim(workflow([action("load")]))
    sim.reconcile()
    stuck(sim, "load")
    sim.reconcile()
    sim.resume_token = "1"
    decision = sim.reconcile()
    names = [type(a).__name__ for a in decision.actions]
    assert names.index("DeleteJob") < names.index("CreateStepJob")
    assert [job.attempt for job in sim.jobs.values()] == [2]


def test_a_run_that_ends_in_the_same_pass_deletes_the_stuck_job() -> None:
    sim = Sim(workflow([action("load")]))
    sim.reconcile()
    stuck(sim, "load")
    sim.set_spec(cancel=True)
    decision = sim.reconcile()
    assert sim.phase == "Cancelled"
    assert DeleteJob(job_name("renewal-watch-1", "load", 1)) in decision.actions
    assert sim.jobs == {}
