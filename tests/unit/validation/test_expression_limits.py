"""CEL cannot stall the operator: a cost estimate at validation and before every evaluation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from towline.expression_cost import COST_BUDGET, MAX_NESTING, MAX_SOURCE_CHARS, cost_shape, runtime_cost_problem
from towline.expressions import ExpressionError, evaluate, render

Check = Callable[[dict[str, Any]], list[Any]]
NESTED = "params.l.map(a, params.l.map(b, a * b)).size()"


def literal_list(size: int) -> str:
    return "[" + ",".join(str(i) for i in range(size)) + "]"


def test_comprehension_depths_and_copying_are_read_from_the_source() -> None:
    shape = cost_shape("params.l.map(a, params.l.exists(b, b == 'map(x, y)')) && params.l.all(c, c > 0)")
    assert shape.comprehensions == ((1, True), (2, False), (1, False))


def test_an_expression_without_comprehensions_is_never_refused_for_data_size() -> None:
    assert runtime_cost_problem("size(params.l) > 3", {"params": {"l": list(range(100_000))}}) is None


def test_nested_comprehensions_over_a_large_list_fail_with_a_clear_error_before_running() -> None:
    with pytest.raises(ExpressionError, match=r"too expensive to evaluate.*over lists of up to 5000 items"):
        evaluate(NESTED, {"params": {"l": list(range(5000))}})


def test_the_same_expression_over_small_data_runs() -> None:
    assert evaluate(NESTED, {"params": {"l": [1, 2, 3]}}) == 3


def test_a_workflow_whose_expression_is_too_costly_whatever_the_data_is_invalid(check: Check) -> None:
    source = f"{literal_list(300)}.map(a, {literal_list(300)}.map(b, a + b)).size() > 0"
    errors = check({"steps": [{"id": "a", "action": "http.request", "with": {"url": "https://x.example"},
                               "when": source}]})
    assert [e.field for e in errors] == ["spec.steps[0].when"]
    assert f"over the budget of {COST_BUDGET:,}" in errors[0].message


def test_nesting_deeper_than_the_limit_is_invalid(check: Check) -> None:
    source = "params.l.all(a, params.l.all(b, params.l.all(c, params.l.all(d, true))))"
    step = {"id": "a", "action": "http.request", "with": {"url": f"https://x.example/${{{{ {source} }}}}"}}
    errors = check({"params": [{"name": "l", "type": "array"}], "steps": [step]})
    assert [e.field for e in errors] == ["spec.steps[0].with.url"]
    assert "nests 4 comprehensions" in errors[0].message and f"limit of {MAX_NESTING}" in errors[0].message


def test_an_overlong_expression_is_refused_before_it_is_compiled() -> None:
    with pytest.raises(ExpressionError, match=f"over the limit of {MAX_SOURCE_CHARS}"):
        evaluate("1" + " + 1" * MAX_SOURCE_CHARS, {})


def test_values_bound_into_a_url_path_or_query_are_percent_encoded() -> None:
    context = {"params": {"id": "../../admin", "q": "a&b=c#x"}}
    url = render("https://api.example.com/v1/items/${{ params.id }}?q=${{ params.q }}", context)
    assert url == "https://api.example.com/v1/items/..%2F..%2Fadmin?q=a%26b%3Dc%23x"


def test_a_dot_segment_bound_into_a_url_path_is_refused() -> None:
    with pytest.raises(ExpressionError, match="would leave the intended path"):
        render("https://api.example.com/v1/${{ params.id }}/x", {"params": {"id": ".."}})


def test_text_that_is_not_a_url_is_interpolated_as_it_is() -> None:
    assert render("deploy ${{ params.q }} now", {"params": {"q": "a&b/c"}}) == "deploy a&b/c now"
