"""A retry that changes something: "fix it in git, then retry" (spec.retryOf.workflowChanged runs the Workflow as
it is now, reusing only the succeeded steps that are the same in it) and a retry with other params (a reused step
that reads a changed param is refused by name)."""

from __future__ import annotations

from typing import Any

from engine_harness import WORKFLOW_UID, Sim, action, workflow
from test_engine_rerun import failed_at_push, retry_spec, three_steps

from towline.api.run import WorkflowRunSpec, WorkflowRunStatus
from towline.api.workflow import WorkflowSpec
from towline.engine import start_retry, start_run
from towline.engine.rerun import RetryBasis


def now(spec: WorkflowSpec, generation: int = 2, **params: Any) -> RetryBasis:
    """The Workflow as the operator snapshots it now, for a retry passing `params`."""
    as_new = WorkflowRunSpec.model_validate({"workflowRef": {"name": "renewal-watch"}, "params": params})
    started = start_run(spec, generation, as_new, workflow_uid=WORKFLOW_UID)
    assert not isinstance(started, list), started
    return RetryBasis(params=started[1], snapshot=started[0])


def fixed_push() -> WorkflowSpec:
    spec = three_steps()
    spec.steps[2] = spec.steps[2].model_copy(update={"with_": {"n": "${{ steps.shape.output.n }}", "fixed": True}})
    return spec


def retried(spec: WorkflowRunSpec, status: WorkflowRunStatus, basis: RetryBasis | None, generation: int = 2) -> Any:
    return start_retry(spec, "renewal-watch", status, generation, workflow_uid=WORKFLOW_UID, basis=basis)


def test_fixed_in_git_the_failed_step_runs_its_new_definition_and_the_rest_is_reused() -> None:
    old = failed_at_push()
    started = retried(retry_spec(["fetch", "shape"], retryOf={"run": "renewal-watch-1", "reuse": ["fetch", "shape"],
                                                              "workflowChanged": True}),
                      old.status, now(fixed_push()))
    assert not isinstance(started, list), started
    snapshot, params, reused, size = started
    assert snapshot.generation == 2 and [e.id for e in reused] == ["fetch", "shape"]
    sim = Sim(fixed_push(), name="renewal-watch-2")
    sim.status = WorkflowRunStatus(workflow_spec=snapshot, params=params, steps=reused, output_bytes=size)
    sim.reconcile()
    assert sim.started() == ["push"] and sim.created[0].inputs == {"n": 2, "fixed": True}


def test_fixed_in_git_is_refused_naming_each_succeeded_step_that_changed() -> None:
    spec = fixed_push()
    spec.steps[1] = spec.steps[1].model_copy(update={"timeout_seconds": 99})
    spec.steps[0] = spec.steps[0].model_copy(update={"needs": []})  # unchanged: needs were already []
    errors = retried(WorkflowRunSpec.model_validate({
        "workflowRef": {"name": "renewal-watch"},
        "retryOf": {"run": "renewal-watch-1", "reuse": ["fetch", "shape"], "workflowChanged": True}}),
        failed_at_push().status, now(spec))
    assert isinstance(errors, list) and len(errors) == 1
    assert errors[0].startswith("spec.retryOf.reuse: step(s) shape succeeded in run 'renewal-watch-1' but differ "
                                "in workflow 'renewal-watch' now (generation 2")


def test_a_step_the_workflow_no_longer_has_counts_as_changed() -> None:
    spec = workflow([action("fetch"), action("push", "fetch")])
    errors = retried(WorkflowRunSpec.model_validate({
        "workflowRef": {"name": "renewal-watch"},
        "retryOf": {"run": "renewal-watch-1", "reuse": ["fetch", "shape"], "workflowChanged": True}}),
        failed_at_push().status, now(spec))
    assert isinstance(errors, list) and "step(s) shape succeeded" in errors[0]


def test_without_workflow_changed_a_changed_workflow_is_still_refused() -> None:
    errors = start_retry(retry_spec(["fetch", "shape"]), "renewal-watch", failed_at_push().status, 2,
                         workflow_uid=WORKFLOW_UID)
    assert isinstance(errors, list) and "changed since run 'renewal-watch-1'" in errors[0]


def with_params() -> WorkflowSpec:
    return workflow([
        action("fetch", **{"with": {"url": "https://crm.example/${{ params.region }}"}}),
        action("shape", "fetch", **{"with": {"n": "${{ steps.fetch.output.n }}"}}),
        action("push", "shape", **{"with": {"env": "${{ params['env'] }}"}}),
    ], params=[{"name": "region", "type": "string", "default": "eu"}, {"name": "env", "type": "string",
                                                                       "default": "staging"}])


def failed_with_params() -> Sim:
    sim = Sim(with_params())
    sim.reconcile()
    sim.finish("fetch", output={"n": 1})
    sim.reconcile()
    sim.finish("shape", output={"n": 2})
    sim.reconcile()
    sim.fail("push", "permanent")
    sim.reconcile()
    return sim


def test_a_retry_with_other_params_reuses_the_steps_that_do_not_read_them() -> None:
    old = failed_with_params()
    spec = retry_spec(["fetch", "shape"], params={"env": "prod"})
    started = retried(spec, old.status, RetryBasis(params={"region": "eu", "env": "prod"}), generation=1)
    assert not isinstance(started, list), started
    assert started[1] == {"region": "eu", "env": "prod"} and [e.id for e in started[2]] == ["fetch", "shape"]


def test_a_reused_step_that_reads_a_changed_param_is_refused_by_name() -> None:
    old = failed_with_params()
    spec = retry_spec(["fetch", "shape"], params={"region": "us"})
    errors = retried(spec, old.status, RetryBasis(params={"region": "us", "env": "staging"}), generation=1)
    assert errors == ["spec.retryOf.reuse[0]: step 'fetch' reads params.region, which this retry changes; "
                      "leave it out so it runs again"]


def test_params_on_a_retry_the_operator_did_not_resolve_are_refused() -> None:
    errors = retried(retry_spec([], params={"env": "prod"}), failed_with_params().status, None, generation=1)
    assert isinstance(errors, list) and errors[0].startswith("spec.params: a retry runs with the params")
