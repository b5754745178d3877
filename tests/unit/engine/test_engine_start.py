"""A run's first reconcile: snapshot and params, or a list of problems that name the fix."""

from __future__ import annotations

from engine_harness import T0, action, workflow

from towline.api.run import MAX_INPUT_BYTES, MAX_INPUT_DEPTH, WorkflowRunSpec, WorkflowRunStatus
from towline.engine import RunView, reject_run, start_run
from towline.engine.start import nesting_depth


def run_spec(**params: object) -> WorkflowRunSpec:
    return WorkflowRunSpec.model_validate({"workflowRef": {"name": "wf"}, "params": params})


PARAMS = [
    {"name": "threshold_days", "type": "integer", "default": 90},
    {"name": "region", "type": "string", "required": True},
    {"name": "dry_run", "type": "boolean", "default": False},
]


def test_start_run_snapshots_steps_and_fills_param_defaults() -> None:
    spec = workflow([action("a")], params=PARAMS, **{"finally": [action("f")]})
    result = start_run(spec, 4, run_spec(region="eu"))
    assert not isinstance(result, list)
    snapshot, params = result
    assert snapshot.generation == 4
    assert [s.id for s in snapshot.steps] == ["a"] and [s.id for s in snapshot.finally_] == ["f"]
    assert params == {"threshold_days": 90, "region": "eu", "dry_run": False}


def test_snapshot_is_independent_of_the_workflow() -> None:
    spec = workflow([action("a", **{"with": {"url": "https://x.test"}})])
    result = start_run(spec, 1, run_spec())
    assert not isinstance(result, list)
    spec.steps[0].with_["url"] = "https://changed.test"
    assert result[0].steps[0].with_["url"] == "https://x.test"


def test_missing_required_param_is_an_error_naming_it() -> None:
    errors = start_run(workflow([action("a")], params=PARAMS), 1, run_spec())
    assert isinstance(errors, list)
    assert any("spec.params.region: required" in e for e in errors)


def test_param_of_the_wrong_type_is_an_error() -> None:
    errors = start_run(workflow([action("a")], params=PARAMS), 1, run_spec(region="eu", threshold_days="90"))
    assert errors == ["spec.params threshold_days: expected integer, got str '90'"]


def test_boolean_is_not_accepted_as_an_integer() -> None:
    errors = start_run(workflow([action("a")], params=PARAMS), 1, run_spec(region="eu", threshold_days=True))
    assert isinstance(errors, list) and "expected integer" in errors[0]


def test_undeclared_param_is_an_error_listing_declared_ones() -> None:
    errors = start_run(workflow([action("a")], params=PARAMS), 1, run_spec(region="eu", treshold=3))
    assert isinstance(errors, list)
    assert "spec.params.treshold: the workflow declares no such param" in errors[0]
    assert "threshold_days" in errors[0]


def test_cycle_in_needs_is_refused() -> None:
    errors = start_run(workflow([action("a", "b"), action("b", "a")]), 1, run_spec())
    assert isinstance(errors, list) and any("cycle" in e for e in errors)


def test_on_failure_must_name_a_compensation() -> None:
    errors = start_run(workflow([action("a", onFailure="undo")]), 1, run_spec())
    assert isinstance(errors, list) and any("steps[0].onFailure" in e for e in errors)


def test_ids_with_the_gate_suffix_are_reserved() -> None:
    errors = start_run(workflow([action("a__approval")]), 1, run_spec())
    assert isinstance(errors, list) and any("reserved" in e for e in errors)


def test_unknown_need_is_refused() -> None:
    errors = start_run(workflow([action("a", "nope")]), 1, run_spec())
    assert isinstance(errors, list) and any("'nope'" in e for e in errors)


def test_reject_run_fails_the_run_with_every_problem() -> None:
    view = RunView("r", "ns", "uid", "wf", run_spec(), WorkflowRunStatus())
    decision = reject_run(view, ["spec.params.region: required", "steps: cycle"], T0)
    assert decision.status.phase == "Failed"
    assert decision.status.message is not None and "region" in decision.status.message
    succeeded = decision.status.conditions[0]
    assert (succeeded.type, succeeded.status, succeeded.reason) == ("Succeeded", "False", "InvalidRun")
    assert view.status.phase == "Pending"


def nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = {"x": value}
    return value


def test_params_nested_deeper_than_the_limit_are_refused_naming_the_field() -> None:
    spec = workflow([action("a")], params=[{"name": "blob", "type": "object"}])
    result = start_run(spec, 1, run_spec(blob=nested(MAX_INPUT_DEPTH)))
    assert result == [f"spec.params: nested more than {MAX_INPUT_DEPTH} levels deep; flatten it"]
    assert not isinstance(start_run(spec, 1, run_spec(blob=nested(MAX_INPUT_DEPTH - 1))), list)


def test_trigger_data_larger_than_the_limit_is_refused_with_the_fix() -> None:
    spec = workflow([action("a")])
    big = WorkflowRunSpec.model_validate({"workflowRef": {"name": "wf"},
                                          "trigger": {"type": "webhook", "data": {"blob": "x" * MAX_INPUT_BYTES}}})
    [problem] = start_run(spec, 1, big)  # type: ignore[misc]
    assert problem.startswith("spec.trigger.data: ") and "pass a reference" in problem


def test_nesting_depth_counts_lists_and_objects_without_recursion() -> None:
    assert nesting_depth("x", limit=10) == 0
    assert nesting_depth({"a": [1, {"b": []}]}, limit=10) == 4
    assert nesting_depth(nested(5000), limit=33) == 33


HOOKS = [
    {"name": "deploy_hook", "webhook": {"verify": {"scheme": "none", "allowUnsigned": True}}},
    {"name": "nightly", "schedule": {"cron": "0 2 * * *"}},
]


def trigger_run(**trigger: object) -> WorkflowRunSpec:
    return WorkflowRunSpec.model_validate({"workflowRef": {"name": "wf"}, "trigger": trigger})


def test_a_webhook_run_of_a_declared_webhook_trigger_starts() -> None:
    spec = workflow([action("a")], triggers=HOOKS)
    assert not isinstance(start_run(spec, 1, trigger_run(type="webhook", name="deploy_hook")), list)
    assert not isinstance(start_run(spec, 1, trigger_run(type="schedule", name="nightly")), list)


def test_a_webhook_run_naming_a_trigger_the_workflow_does_not_declare_as_a_webhook_cannot_start() -> None:
    """What a compromised ingress would send: the API server cannot read the Workflow, the operator does."""
    spec = workflow([action("a")], triggers=HOOKS)
    for forged in (trigger_run(type="webhook", name="nightly"), trigger_run(type="webhook", name="other"),
                   trigger_run(type="webhook")):
        [problem] = start_run(spec, 1, forged)  # type: ignore[misc]
        assert problem.startswith("spec.trigger.name: the workflow declares no webhook trigger named ")
        assert "(its webhook triggers: deploy_hook)" in problem and "start a manual run" in problem
    [problem] = start_run(workflow([action("a")]), 1, trigger_run(type="webhook", name="deploy_hook"))  # type: ignore[misc]
    assert "(its webhook triggers: none)" in problem


def test_a_schedule_run_must_name_a_declared_schedule() -> None:
    spec = workflow([action("a")], triggers=HOOKS)
    [problem] = start_run(spec, 1, trigger_run(type="schedule", name="deploy_hook"))  # type: ignore[misc]
    assert "declares no schedule trigger named 'deploy_hook' (its schedule triggers: nightly)" in problem
