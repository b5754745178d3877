"""`spec.retryOf`: a new run that starts again from a finished run's failed steps."""

from __future__ import annotations

from typing import Any

from engine_harness import WORKFLOW_UID, Sim, action, workflow

from towline.api.run import WorkflowRunSpec, WorkflowRunStatus
from towline.engine import REUSED_REASON, earlier_requesters, start_retry


def three_steps() -> Any:
    return workflow([
        action("fetch"),
        action("shape", "fetch", **{"with": {"n": "${{ steps.fetch.output.n }}"}}),
        action("push", "shape", **{"with": {"n": "${{ steps.shape.output.n }}"}}),
    ])


def failed_at_push() -> Sim:
    sim = Sim(three_steps())
    sim.reconcile()
    sim.finish("fetch", output={"n": 1})
    sim.reconcile()
    sim.finish("shape", output={"n": 2})
    sim.reconcile()
    sim.fail("push", "permanent")
    sim.reconcile()
    assert sim.phase == "Failed"
    return sim


def retry_spec(reuse: list[str], **extra: Any) -> WorkflowRunSpec:
    return WorkflowRunSpec.model_validate(
        {"workflowRef": {"name": "renewal-watch"}, "retryOf": {"run": "renewal-watch-1", "reuse": reuse}, **extra}
    )


def retry(
    spec: WorkflowRunSpec, status: WorkflowRunStatus, generation: int = 1, *,
    workflow: str = "renewal-watch", uid: str = WORKFLOW_UID,
) -> Any:
    """start_retry against the Workflow as it is now: its name, generation and uid."""
    return start_retry(spec, workflow, status, generation, workflow_uid=uid)


def test_retry_reruns_from_the_failed_step_with_the_reused_outputs() -> None:
    old = failed_at_push()
    started = retry(retry_spec(["fetch", "shape"]), old.status)
    assert not isinstance(started, list), started
    snapshot, params, reused, size = started
    assert [(e.id, e.phase, e.reason, e.output) for e in reused] == [
        ("fetch", "Succeeded", REUSED_REASON, {"n": 1}), ("shape", "Succeeded", REUSED_REASON, {"n": 2})]
    assert size == len('{"n":1}') + len('{"n":2}')
    sim = Sim(three_steps(), name="renewal-watch-2")
    sim.status = WorkflowRunStatus(workflow_spec=snapshot, params=params, steps=reused, output_bytes=size)
    sim.reconcile()
    assert sim.started() == ["push"]
    assert sim.created[0].inputs == {"n": 2}
    sim.finish("push")
    sim.reconcile()
    assert sim.phase == "Succeeded"


def test_retry_of_a_run_of_another_workflow_is_refused() -> None:
    errors = retry(retry_spec(["fetch"]), failed_at_push().status, workflow="other-workflow")
    assert errors and "spec.retryOf.run" in errors[0] and "same workflow" in errors[0]


def test_retry_of_a_running_run_is_refused() -> None:
    sim = Sim(three_steps())
    sim.reconcile()
    errors = retry(retry_spec([]), sim.status)
    assert errors == ["spec.retryOf.run: run 'renewal-watch-1' is Running; retry it once it has finished"]


def test_a_failed_step_cannot_be_reused() -> None:
    errors = retry(retry_spec(["fetch", "shape", "push"]), failed_at_push().status)
    assert errors == ["spec.retryOf.reuse[2]: step 'push' of run 'renewal-watch-1' is Failed; "
                      "only Succeeded steps can be reused"]


def test_a_reused_step_needs_its_needs_reused() -> None:
    errors = retry(retry_spec(["shape"]), failed_at_push().status)
    assert errors and errors[0].startswith("spec.retryOf.reuse[0]: 'shape' needs fetch")


def test_an_approval_is_never_reused() -> None:
    sim = Sim(workflow([{"id": "review", "approval": {"approvers": {"users": ["bob"]}}}, action("a", "review")]))
    sim.reconcile()
    sim.decide_approval("review", "Approved")
    sim.reconcile()
    sim.fail("a")
    sim.reconcile()
    errors = retry(retry_spec(["review"]), sim.status)
    assert errors and "approval counts only for its own run" in errors[0]


def test_a_retry_takes_the_old_runs_params_not_new_ones() -> None:
    errors = retry(retry_spec([], params={"x": 1}), failed_at_push().status)
    assert errors == ["spec.params: a retry runs with the params of the run it retries; remove spec.params"]


def test_unknown_step_is_named() -> None:
    errors = retry(retry_spec(["nope"]), failed_at_push().status)
    assert errors == ["spec.retryOf.reuse[0]: 'nope' is not a step of the run's main DAG; list only its steps"]


def test_a_retry_after_the_workflow_changed_is_refused() -> None:
    errors = retry(retry_spec(["fetch"]), failed_at_push().status, 2)
    assert errors == ["spec.retryOf.run: workflow 'renewal-watch' changed since run 'renewal-watch-1' "
                      "(generation 1, now 2); a retry runs only what that run ran: start a new run instead"]


def test_a_workflow_deleted_and_created_again_is_not_retried_even_at_the_same_generation() -> None:
    errors = retry(retry_spec(["fetch"]), failed_at_push().status, uid="uid-2")
    assert errors == ["spec.retryOf.run: workflow 'renewal-watch' was deleted and created again since run "
                      "'renewal-watch-1' (uid workflow-uid-1, now uid-2); a retry runs only what that run ran: "
                      "start a new run instead"]


def test_a_run_whose_snapshot_records_no_workflow_uid_is_not_retried() -> None:
    old = failed_at_push()
    assert old.status.workflow_spec is not None
    old.status.workflow_spec.uid = None
    errors = retry(retry_spec(["fetch"]), old.status)
    assert isinstance(errors, list) and "records no Workflow uid" in errors[0]


def test_a_retry_counts_who_requested_the_runs_it_repeats() -> None:
    first = failed_at_push().status
    assert earlier_requesters("carol", first) == ["carol"]
    second = first.model_copy(update={"earlier_requesters": ["carol"]})
    assert earlier_requesters("bob", second) == ["carol", "bob"]
    assert earlier_requesters("carol", second) == ["carol"]
    chain = first.model_copy(update={"earlier_requesters": [f"user{n}" for n in range(16)]})
    assert earlier_requesters("last", chain) == ["user0", *[f"user{n}" for n in range(2, 16)], "last"]
