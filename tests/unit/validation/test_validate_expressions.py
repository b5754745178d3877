"""CEL in `when` and `${{ }}` bindings: compiles, reads only declared params and upstream steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from towline import expressions
from towline.validation import validate_workflow_manifest
from towline.validation.bindings import referenced_params

Check = Callable[[dict[str, Any]], list[Any]]


def step(step_id: str, *needs: str, url: str = "https://api.example.com/x", **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "action": "http.request", "with": {"url": url}, "needs": list(needs), **extra}


def test_a_when_that_does_not_compile_gets_cels_positioned_message(check: Check) -> None:
    errors = check({"steps": [step("a"), step("b", "a", when="steps.a.output.ok ==")]})
    assert len(errors) == 1
    assert errors[0].field == "spec.steps[1].when"
    assert errors[0].message.startswith("CEL does not compile:")
    assert "1:21" in errors[0].message and "^" in errors[0].message


def test_a_binding_that_does_not_compile_names_the_input(check: Check) -> None:
    errors = check({"steps": [step("a", url="https://x.example.com/${{ params.( }}")]})
    assert [e.field for e in errors] == ["spec.steps[0].with.url"]
    assert "CEL does not compile" in errors[0].message


def test_reading_a_step_that_is_not_upstream_says_to_add_it_to_needs(check: Check) -> None:
    errors = check({"steps": [step("load"), step("use", url="https://x.example.com/${{ steps.load.output.id }}")]})
    assert [(e.field, e.message) for e in errors] == [(
        "spec.steps[1].with.url",
        "reads steps.load, which is not upstream of this step, so its output may not exist yet; "
        "add 'load' to needs (directly or through a step it needs)",
    )]


def test_upstream_is_transitive(check: Check) -> None:
    spec = {"steps": [step("a"), step("b", "a"), step("c", "b", when="steps.a.output.status == 200")]}
    assert check(spec) == []


def test_reading_an_unknown_step_suggests_the_close_match(check: Check) -> None:
    errors = check({"steps": [step("load"), step("b", "load", when="steps.lod.output.ok")]})
    assert errors[0].message == "steps.lod is not a step; did you mean 'load'?"


def test_an_unknown_root_variable_lists_the_ones_that_exist(check: Check) -> None:
    errors = check({"steps": [step("a", when="param.x > 1")]})
    assert errors[0].message == (
        "'param' is not defined; expressions read params, run, steps, trigger; did you mean 'params'?"
    )


def test_macro_variables_are_not_unknown(check: Check) -> None:
    spec = {"steps": [step("a"), step("b", "a", when="steps.a.output.items.exists(i, i.urgent)")]}
    assert check(spec) == []


def test_an_undeclared_param_is_reported(check: Check) -> None:
    errors = check({"params": [{"name": "threshold_days"}], "steps": [step("a", when="params.treshold_days > 3")]})
    assert errors[0].message == "params.treshold_days is not declared under spec.params; did you mean 'threshold_days'?"


def test_trigger_params_are_not_workflow_params() -> None:
    assert referenced_params("trigger.params.x + params['y'] + params.z") == {"y", "z"}


def test_finally_steps_read_any_step(check: Check) -> None:
    spec = {"steps": [step("a"), step("b")],
            "finally": [{"id": "f", "action": "notify.slack", "credentials": {"slack": "s"},
                         "with": {"text": "${{ steps.a.phase }} ${{ steps.b.phase }} ${{ run.phase }}"}}]}
    assert check(spec) == []


def test_a_compensation_reads_what_every_step_naming_it_has_seen(check: Check) -> None:
    comp = step("undo", url="https://x.example.com/${{ steps.reserve.output.id }}/${{ steps.charge.output.id }}")
    spec = {"steps": [step("reserve"), step("charge", "reserve", onFailure="undo")], "compensations": [comp]}
    assert check(spec) == []
    spec["steps"].append(step("other", onFailure="undo"))
    errors = check(spec)
    assert {e.message.split(",")[0] for e in errors} == {"reads steps.reserve", "reads steps.charge"}


def test_when_is_plain_cel_not_a_template(check: Check) -> None:
    errors = check({"steps": [step("a", when="${{ params.x }} == 1")]})
    assert errors[0].field == "spec.steps[0].when"
    assert errors[0].message.startswith("when is plain CEL; write it without ${{ }}")


def test_a_when_wrapped_whole_in_a_template_is_accepted(check: Check) -> None:
    assert check({"params": [{"name": "go", "type": "boolean"}], "steps": [step("a", when="${{ params.go }}")]}) == []


def test_an_unclosed_binding_is_reported(check: Check) -> None:
    errors = check({"steps": [step("a", url="https://x.example.com/${{ params.x")]})
    assert [(e.field, e.message) for e in errors] == [("spec.steps[0].with.url", "a ${{ is not closed with }}")]


def test_approval_messages_and_wait_times_are_checked(check: Check) -> None:
    spec = {"steps": [
        {"id": "gate", "approval": {"message": "Go ${{ steps.nope.output }}?"}},
        {"id": "pause", "wait": {"until": "${{ trigger.data.at + }}"}},
    ]}
    assert [e.field for e in check(spec)] == ["spec.steps[0].approval.message", "spec.steps[1].wait.until"]


def test_bindings_in_trigger_params_cannot_read_steps(check: Check) -> None:
    spec = {"params": [{"name": "since"}], "steps": [step("a")],
            "triggers": [{"name": "t", "schedule": {"cron": "@daily"},
                          "params": {"since": "${{ steps.a.output.x }}"}}]}
    assert "not upstream" in check(spec)[0].message


def test_validating_a_workflow_twice_compiles_each_expression_once(catalog: Any) -> None:
    spec = {"steps": [step("a"), step("b", "a", when="steps.a.output.unique_marker_for_cache_test == 1")]}
    validate_workflow_manifest(spec, catalog)
    misses = expressions.compile_expression.cache_info().misses
    validate_workflow_manifest(spec, catalog)
    assert expressions.compile_expression.cache_info().misses == misses
