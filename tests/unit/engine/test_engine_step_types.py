"""Runs of user step types: resolved once at start, checked against their schemas, retried by their policy."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine_harness import Sim, workflow

from towline.api.run import WorkflowRunSpec
from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.engine import start_run
from towline.validation.catalog import connector_catalog
from towline.validation.steptypes import StepTypeCatalog

ACTION = "steptype/deploy"
SPEC = StepTypeSpec.model_validate({
    "image": "registry.example.com/team/deploy:1.4.0",
    "inputs": {"type": "object", "required": ["replicas"], "properties": {"replicas": {"type": "integer"}}},
    "outputs": {"type": "object", "required": ["revision"], "properties": {"revision": {"type": "integer"}}},
    "timeoutSeconds": 120,
    "retry": {"limit": 2, "baseDelaySeconds": 1, "retryOn": ["transient"]},
    "mutating": False,
})
RESOLVED = ResolvedStepType(kind="StepType", name="deploy", uid="type-uid", generation=3, spec=SPEC)


def deploy(step_id: str = "roll", **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "action": ACTION, "with": {"replicas": 2}, **extra}


def sim(*steps: dict[str, Any], **extra: Any) -> Sim:
    return Sim(workflow(list(steps)), step_types={ACTION: RESOLVED},
               catalog=StepTypeCatalog(connector_catalog(), {ACTION: SPEC}), **extra)


def test_the_run_snapshots_the_type_and_its_job_carries_it() -> None:
    run = sim(deploy())
    snapshot = run.status.workflow_spec
    assert snapshot is not None and snapshot.step_types == {ACTION: RESOLVED}
    run.reconcile()
    [job] = run.created
    assert job.step_type == RESOLVED
    assert job.timeout_seconds == 120  # the type's default: the step sets none


def test_a_step_timeout_wins_over_the_types() -> None:
    run = sim(deploy(timeoutSeconds=30))
    run.reconcile()
    assert run.created[0].timeout_seconds == 30


def test_a_run_naming_a_type_that_is_missing_or_not_ready_cannot_start() -> None:
    spec = workflow([deploy(), {"id": "other", "action": "clustersteptype/gone", "needs": ["roll"]}])
    run_spec = WorkflowRunSpec.model_validate({"workflowRef": {"name": "wf"}})
    problems = start_run(spec, 1, run_spec, step_types={ACTION: "is not Ready: spec.image: not allowed"})
    assert problems == [
        "step roll: steptype/deploy is not Ready: spec.image: not allowed; register it (kubectl apply -f its "
        "manifest) or change the step's action",
        "step other: clustersteptype/gone is not registered; register it (kubectl apply -f its manifest) or "
        "change the step's action",
    ]


def test_an_output_that_breaks_the_types_schema_fails_the_step_permanently() -> None:
    run = sim(deploy())
    run.reconcile()
    run.finish("roll", output={"revision": "seven"})
    run.reconcile()
    step = run.step("roll")
    assert (step.phase, step.error_class) == ("Failed", "permanent")
    assert step.message == ("the step's output does not match its type's outputs schema: "
                            "output.revision: 'seven' is not of type 'integer'")
    assert step.output is None


def test_an_output_that_fits_flows_to_the_next_step() -> None:
    run = sim(deploy(), {"id": "after", "action": "http.request", "needs": ["roll"],
                         "with": {"url": "https://example.com/${{ steps.roll.output.revision }}"}})
    run.reconcile()
    run.finish("roll", output={"revision": 7})
    run.reconcile()
    assert run.created[-1].inputs == {"url": "https://example.com/7"}


def test_resolved_inputs_that_break_the_schema_fail_the_step_before_any_job() -> None:
    run = Sim(
        workflow([deploy(**{"with": {"replicas": "${{ params.replicas }}"}})],
                 params=[{"name": "replicas", "type": "string", "default": "many"}]),
        step_types={ACTION: RESOLVED}, catalog=StepTypeCatalog(connector_catalog(), {ACTION: SPEC}))
    run.reconcile()
    step = run.step("roll")
    assert run.created == []
    assert (step.phase, step.error_class) == ("Failed", "validation")
    assert step.message == ("the inputs, resolved, do not match steptype/deploy's inputs schema: "
                            "with.replicas: 'many' is not of type 'integer'")


def test_the_types_retry_policy_applies_by_error_class() -> None:
    run = sim(deploy())
    run.reconcile()
    run.fail("roll", "transient")
    run.reconcile()
    assert run.phase_of("roll") == "Retrying"
    run.advance(5)
    run.reconcile()
    assert [job.attempt for job in run.created] == [1, 2]
    run.fail("roll", "permanent")
    run.reconcile()
    assert run.phase_of("roll") == "Failed"  # permanent is not in the type's retryOn


MUTATING_WITH_KEY = SPEC.model_copy(update={"mutating": True, "idempotency_key": True})
MUTATING_WITHOUT_KEY = SPEC.model_copy(update={"mutating": True, "idempotency_key": False})


def mutating_sim(spec: StepTypeSpec) -> Sim:
    resolved = RESOLVED.model_copy(update={"spec": spec})
    return Sim(workflow([deploy()]), step_types={ACTION: resolved},
               catalog=StepTypeCatalog(connector_catalog(), {ACTION: spec}))


def test_a_lost_attempt_of_a_type_that_honours_the_idempotency_key_is_retried() -> None:
    run = mutating_sim(MUTATING_WITH_KEY)
    run.reconcile()
    run.finish("roll", ok=False, result=False, reason="PodFailed")
    run.reconcile()
    assert (run.phase_of("roll"), run.step("roll").error_class) == ("Retrying", "transient")


def test_an_attempt_stopped_at_its_deadline_without_a_word_failed_by_timeout() -> None:
    """The kubelet stopped the pod at `activeDeadlineSeconds` before the runner wrote its result: the step ran past
    its time limit, the same class the runner gives when it stops the work itself; this type retries only
    `transient`, so the attempt is the step's last."""
    run = mutating_sim(MUTATING_WITH_KEY)
    run.reconcile()
    run.finish("roll", ok=False, result=False, reason="DeadlineExceeded")
    run.reconcile()
    assert (run.phase_of("roll"), run.step("roll").error_class) == ("Failed", "timeout")


def test_a_mutating_attempt_without_the_key_stopped_at_its_deadline_may_have_acted() -> None:
    run = mutating_sim(MUTATING_WITHOUT_KEY)
    run.reconcile()
    run.finish("roll", ok=False, result=False, reason="DeadlineExceeded")
    run.reconcile()
    assert (run.phase_of("roll"), run.step("roll").error_class) == ("Failed", "unknown_side_effect")


def test_a_lost_attempt_of_a_mutating_type_without_the_key_is_left_for_a_person() -> None:
    run = mutating_sim(MUTATING_WITHOUT_KEY)
    run.reconcile()
    run.vanish("roll")
    run.reconcile()
    assert (run.phase_of("roll"), run.step("roll").error_class) == ("Failed", "unknown_side_effect")


def test_each_attempt_records_the_image_the_kubelet_ran() -> None:
    run = sim(deploy())
    run.reconcile()
    digest = "registry.example.com/team/deploy@sha256:" + "a" * 64
    run.jobs[("roll", 1)] = replace(run.jobs[("roll", 1)], image=digest)
    run.finish("roll", output={"revision": 1})
    run.reconcile()
    assert [record.image for record in run.step("roll").history] == [digest]
