"""Subflow steps: fields that do not apply, params' bindings, and, with the namespace's other Workflows, an unknown
or not-allowed Workflow, undeclared or missing params and cycles, each at its field path with the fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from towline.api.workflow import ValidationError, WorkflowSpec
from towline.plugin.offline import validate_documents
from towline.validation.subflows import subflow_reference_errors, workflows_by_name

Check = Callable[[dict[str, Any]], list[ValidationError]]


def calling(name: str, step_id: str = "change", **extra: Any) -> dict[str, Any]:
    return {"steps": [{"id": step_id, "workflow": {"name": name, **extra}}]}


def shared(**extra: Any) -> dict[str, Any]:
    return {"subflow": {"allowed": True}, "params": [{"name": "change", "type": "string", "required": True}],
            "steps": [{"id": "noop", "action": "data.transform", "with": {"data": {}}}], **extra}


def spec(raw: dict[str, Any]) -> WorkflowSpec:
    return WorkflowSpec.model_validate(raw)


def found(errors: list[ValidationError]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in errors]


def test_a_subflow_step_with_bound_params_is_valid(check: Check) -> None:
    raw = {"params": [{"name": "release", "type": "string"}],
           "steps": [{"id": "change", "workflow": {"name": "change-approval",
                                                    "params": {"change": "${{ params.release }}"}}}]}
    assert check(raw) == []


def test_fields_that_do_not_apply_to_a_subflow_step_are_refused_by_name(check: Check) -> None:
    raw = {"steps": [{"id": "change", "workflow": {"name": "x"}, "retry": {"limit": 2}, "timeoutSeconds": 5}]}
    fields = [field for field, _ in found(check(raw))]
    assert fields == ["spec.steps[0].retry", "spec.steps[0].timeoutSeconds"]
    assert "does not apply to a subflow step" in check(raw)[0].message


def test_a_binding_in_params_reading_an_unknown_param_is_refused(check: Check) -> None:
    errors = check(calling("x", params={"change": "${{ params.nope }}"}))
    assert [e.field for e in errors] == ["spec.steps[0].workflow.params.change"]


def test_an_unknown_workflow_is_refused_naming_the_field() -> None:
    errors = subflow_reference_errors("release", spec(calling("nope")), {})
    assert found(errors) == [("spec.steps[0].workflow.name", "no Workflow 'nope' in this namespace; a subflow runs a "
                              "Workflow of the same namespace: create it or correct the name")]


def test_a_workflow_that_does_not_allow_subflows_is_refused() -> None:
    private = {**shared(), "subflow": {"allowed": False}}
    errors = subflow_reference_errors("release", spec(calling("private", params={"change": "1"})),
                                      {"private": spec(private)})
    assert found(errors) == [("spec.steps[0].workflow.name", "Workflow 'private' does not allow runs as a subflow: "
                              "set spec.subflow.allowed: true in it, or call another")]


def test_params_the_workflow_does_not_declare_or_requires_are_named() -> None:
    errors = subflow_reference_errors("release", spec(calling("shared", params={"other": 1})),
                                      {"shared": spec(shared())})
    assert [e.field for e in errors] == ["spec.steps[0].workflow.params.other", "spec.steps[0].workflow.params"]
    assert "requires param 'change'" in errors[1].message


def test_a_cycle_is_refused_naming_it() -> None:
    a = spec({**shared(), **calling("b", params={"change": "1"})})
    b = spec({**shared(), **calling("c", params={"change": "1"})})
    c = spec({**shared(), **calling("a", params={"change": "1"})})
    errors = subflow_reference_errors("a", a, {"b": b, "c": c})
    assert found(errors) == [("spec.steps[0].workflow.name", "subflows call each other in a cycle: a -> b -> c -> a; "
                              "a Workflow may not run itself, directly or through others")]


def test_a_workflow_calling_itself_is_a_cycle() -> None:
    a = spec({**shared(), **calling("a", params={"change": "1"})})
    assert "a -> a" in subflow_reference_errors("a", a, {})[-1].message


def test_offline_validate_checks_the_workflows_of_the_same_files_and_leaves_others_alone() -> None:
    def document(name: str, raw: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": name}, "spec": raw}

    documents = [document("a", {**shared(), **calling("b", params={"change": "1"})}),
                 document("b", {**shared(), **calling("a", params={"change": "1"})}),
                 document("c", calling("elsewhere"))]
    lines, problems = validate_documents("flows.yaml", documents)
    assert problems == 2
    assert "flows.yaml: a: spec.steps[0].workflow.name: subflows call each other in a cycle: a -> b -> a" in lines[0]
    assert "flows.yaml: c: valid" in lines


def test_workflows_by_name_reads_each_spec() -> None:
    found_specs = workflows_by_name([{"metadata": {"name": "x"}, "spec": shared()}, {"metadata": {"name": "y"}}])
    assert found_specs["y"] is None and found_specs["x"] is not None and found_specs["x"].subflow.allowed
