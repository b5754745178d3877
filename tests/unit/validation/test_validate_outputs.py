"""spec.outputs: each is CEL over params and steps sure to have run, named at spec.outputs.<name>."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from towline.api.workflow import ValidationError

Check = Callable[[dict[str, Any]], list[ValidationError]]


def step(step_id: str, *needs: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "action": "http.request", "with": {"url": "https://api.example.com/x"},
            "needs": list(needs), **extra}


def test_outputs_over_steps_and_params_are_valid(check: Check) -> None:
    spec = {"params": [{"name": "env", "type": "string", "default": "prod"}],
            "steps": [step("build"), step("deploy", "build")], "finally": [step("tell")],
            "outputs": {"version": "steps.build.output.version", "where": "params.env",
                        "told": "${{ steps.tell.phase }}"}}
    assert check(spec) == []


def test_an_output_naming_an_unknown_step_names_the_output_and_the_close_match(check: Check) -> None:
    errors = check({"steps": [step("build")], "outputs": {"version": "steps.biuld.output.version"}})
    assert [(e.field, e.message) for e in errors] == [
        ("spec.outputs.version", "steps.biuld is not a step; did you mean 'build'?"),
    ]


def test_an_output_reading_a_step_behind_a_when_is_refused_with_the_fix(check: Check) -> None:
    spec = {"steps": [step("build"), step("deploy", "build", when="steps.build.output.ok")],
            "outputs": {"url": "steps.deploy.output.url"}}
    errors = check(spec)
    assert [e.field for e in errors] == ["spec.outputs.url"]
    assert errors[0].message.startswith("reads steps.deploy, which may not run in a run that succeeds")
    assert "remove the condition from deploy" in errors[0].message


def test_an_output_reading_a_step_after_a_skippable_one_is_refused(check: Check) -> None:
    spec = {"steps": [step("a", when="true"), step("b", "a"), step("c", "a", runIfSkipped=True)],
            "outputs": {"from_b": "steps.b.output", "from_c": "steps.c.output"}}
    assert [e.field for e in check(spec)] == ["spec.outputs.from_b"]


def test_an_output_reading_a_step_that_may_fail_and_continue_is_refused(check: Check) -> None:
    spec = {"steps": [step("a", onFailure="continue")], "outputs": {"x": "steps.a.output"}}
    assert [e.field for e in check(spec)] == ["spec.outputs.x"]


def test_an_output_reading_a_compensation_is_refused(check: Check) -> None:
    spec = {"steps": [step("a", onFailure="undo")], "compensations": [step("undo")],
            "outputs": {"x": "steps.undo.output"}}
    errors = check(spec)
    assert [e.field for e in errors] == ["spec.outputs.x"]
    assert "is a compensation" in errors[0].message


def test_an_output_may_not_read_the_trigger_or_the_run(check: Check) -> None:
    errors = check({"steps": [step("a")], "outputs": {"who": "trigger.data.user", "name": "run.name"}})
    assert [(e.field, e.message) for e in errors] == [
        ("spec.outputs.name", "'run' is not readable here; outputs read params and steps"),
        ("spec.outputs.who", "'trigger' is not readable here; outputs read params and steps"),
    ]


def test_an_output_that_does_not_compile_gets_cels_message(check: Check) -> None:
    errors = check({"steps": [step("a")], "outputs": {"x": "steps.a.output =="}})
    assert [e.field for e in errors] == ["spec.outputs.x"]
    assert errors[0].message.startswith("CEL does not compile:")


def test_output_names_are_identifiers_and_their_count_is_capped(check: Check) -> None:
    errors = check({"steps": [step("a")], "outputs": {"Bad-Name": "steps.a.output"}})
    assert errors and errors[0].field.startswith("spec.outputs")
    errors = check({"steps": [step("a")], "outputs": {f"o{i}": "steps.a.output" for i in range(33)}})
    assert [e.field for e in errors] == ["spec.outputs"]
    assert "32" in errors[0].message
