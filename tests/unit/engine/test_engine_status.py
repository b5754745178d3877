"""Bounded status, events without outputs, idempotency keys, and replay after a crash."""

from __future__ import annotations

from engine_harness import Sim, action, workflow

from towline.api.run import WorkflowRunStatus
from towline.engine import MAX_RUN_OUTPUT_BYTES, MAX_STEP_OUTPUT_BYTES, idempotency_key


def test_output_over_the_step_limit_fails_the_step_with_a_clear_error() -> None:
    sim = Sim(workflow([action("a")]))
    sim.reconcile()
    sim.finish("a", output={"blob": "x" * MAX_STEP_OUTPUT_BYTES})
    sim.reconcile()
    step = sim.step("a")
    assert (step.phase, step.error_class, step.output) == ("Failed", "output_too_large", None)
    assert f"limit is {MAX_STEP_OUTPUT_BYTES} bytes per step" in (step.message or "")


def test_outputs_over_the_run_budget_fail_the_step_that_crosses_it() -> None:
    count = MAX_RUN_OUTPUT_BYTES // 4000 + 1
    sim = Sim(workflow([action(f"s{i}") for i in range(count)], policy={"parallelism": 100}))
    sim.reconcile()
    for i in range(count):
        sim.finish(f"s{i}", output="y" * 3990)
    sim.reconcile()
    assert sim.phase_of(f"s{count - 1}") == "Failed"
    assert "per run" in (sim.step(f"s{count - 1}").message or "")
    assert sim.status.output_bytes <= MAX_RUN_OUTPUT_BYTES


def test_event_messages_never_contain_outputs() -> None:
    sim = Sim(workflow([action("a"), action("b", "a")]))
    sim.reconcile()
    sim.finish("a", output={"token": "s3cr3t-output-value"})
    sim.reconcile()
    sim.fail("b", "transient")
    sim.succeed_all()
    assert sim.events()
    assert all("s3cr3t" not in event.message for event in sim.events())


def test_idempotency_key_comes_from_workflow_run_step_and_attempt_group() -> None:
    sim = Sim(workflow([{"id": "a", "action": "crm.update"}]))
    sim.reconcile()
    assert sim.created[0].idempotency_key == idempotency_key("renewal-watch", sim.uid, "a", 0)
    assert sim.step("a").idempotency_key == sim.created[0].idempotency_key


def test_replay_after_a_crash_adopts_the_job_instead_of_creating_it_again() -> None:
    sim = Sim(workflow([action("a")]))
    sim.reconcile(persist=False)
    sim.reconcile()
    assert len(sim.created) == 1
    assert (sim.phase_of("a"), sim.step("a").attempt) == ("Running", 1)


def test_replay_after_a_crash_reads_the_result_of_an_adopted_job() -> None:
    sim = Sim(workflow([action("a"), action("b", "a")]))
    sim.reconcile(persist=False)
    sim.finish("a", output={"n": 1})
    sim.reconcile()
    assert sim.phase_of("a") == "Succeeded" and sim.step("a").output == {"n": 1}
    assert sim.started() == ["a", "b"]


def test_replay_after_a_crash_adopts_a_retry_attempt() -> None:
    sim = Sim(workflow([action("a", retry={"limit": 2, "backoff": "fixed", "baseDelaySeconds": 1})]))
    sim.reconcile()
    sim.fail("a", "transient")
    sim.reconcile()
    sim.advance(1)
    sim.reconcile(persist=False)
    sim.reconcile()
    assert [j.attempt for j in sim.created] == [1, 2] and sim.step("a").attempt == 2


def test_step_message_is_capped_to_fit_its_field() -> None:
    sim = Sim(workflow([action("a")]))
    sim.reconcile()
    sim.fail("a", message="e" * 10_000)
    sim.reconcile()
    assert len(sim.step("a").message or "") <= 2048
    assert all(len(h.message or "") <= 1024 for h in sim.step("a").history)


def test_status_round_trips_through_the_wire_form() -> None:
    sim = Sim(workflow([action("a", retry={"limit": 1}), {"id": "g", "approval": {}}]))
    sim.reconcile()
    sim.fail("a", "transient")
    sim.reconcile()
    again = WorkflowRunStatus.model_validate(sim.status.to_wire())
    assert again.to_wire() == sim.status.to_wire()
