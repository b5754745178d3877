"""data.transform: CEL expressions build the output; no network involved."""

from __future__ import annotations

import pytest
from connector_testkit import make_ctx, run_action

from towline import expressions
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.registry import validate_inputs

ACCOUNTS = {"accounts": [{"id": "a1", "days": 30}, {"id": "a2", "days": 120}]}


def test_each_field_is_the_value_of_its_expression() -> None:
    inputs = {
        "data": ACCOUNTS,
        "fields": {
            "count": "size(data.accounts)",
            "due": "data.accounts.filter(a, a.days < 90).map(a, a.id)",
            "label": "'renewals: ' + string(size(data.accounts))",
        },
    }
    assert run_action("data.transform", inputs, make_ctx()).output == {
        "count": 2,
        "due": ["a1"],
        "label": "renewals: 2",
    }


def test_timestamps_and_durations_become_json() -> None:
    inputs = {"fields": {"at": "timestamp('2026-01-01T08:00:00Z')", "wait": "duration('90s')"}}
    assert run_action("data.transform", inputs, make_ctx()).output == {"at": "2026-01-01T08:00:00Z", "wait": "90s"}


def test_missing_field_is_a_permanent_error_naming_the_output_field() -> None:
    inputs = {"data": ACCOUNTS, "fields": {"owner": "data.owner"}}
    with pytest.raises(ActionError, match=r"fields\.owner: CEL evaluation failed: no such key 'owner'") as caught:
        run_action("data.transform", inputs, make_ctx())
    assert caught.value.error_class is ErrorClass.PERMANENT


def test_syntax_error_is_reported_at_validation_time() -> None:
    problems = validate_inputs("data.transform", {"fields": {"count": "size(data.accounts"}})
    assert len(problems) == 1
    assert problems[0].startswith("with.fields: fields.count: not a valid CEL expression")


def test_expression_built_from_a_binding_is_checked_only_after_resolution() -> None:
    assert validate_inputs("data.transform", {"fields": {"x": "${{ params.expr }}"}}) == []


def test_an_empty_field_list_is_refused() -> None:
    assert validate_inputs("data.transform", {"fields": {}}) == [
        "with.fields: Dictionary should have at least 1 item after validation, not 0"
    ]


@pytest.mark.parametrize(
    ("expression", "expected"), [("duration('90s')", "90s"), ("b'\\xff\\x00ok'", "/wBvaw==")]
)
def test_a_when_and_a_data_transform_see_a_value_in_the_same_form(expression: str, expected: str) -> None:
    transformed = run_action("data.transform", {"fields": {"value": expression}}, make_ctx()).output["value"]
    bound = expressions.render("${{ " + expression + " }}", {})
    assert transformed == bound == expected
    # A later step's `when` reads the transform's output and compares it with the same expression's form.
    context = {"steps": {"t": {"output": {"value": transformed}}}, "params": {"value": bound}}
    assert expressions.evaluate_condition("steps.t.output.value == params.value", context)
    assert expressions.evaluate_condition(f"steps.t.output.value == '{expected}'", context)
