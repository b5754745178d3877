"""forEach: items, key, maxParallel and the loop variables, each refused at its field path with the fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from towline.api.loops import MAX_LOOP_ITEMS, MAX_LOOP_PARALLEL
from towline.api.workflow import ValidationError

Check = Callable[[dict[str, Any]], list[ValidationError]]


def step(step_id: str, *needs: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "action": "http.request", "with": {"url": "https://api.example.com/x"},
            "needs": list(needs), **extra}


def deploy(for_each: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return step("deploy", "inventory", forEach=for_each,
                **{"with": {"url": "https://deploy.example.com/${{ item.name }}?n=${{ index }}"}, **extra})


def found(errors: list[ValidationError]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in errors]


def test_a_loop_over_an_upstream_output_reading_item_and_index_is_valid(check: Check) -> None:
    spec = {"params": [{"name": "only", "type": "string", "default": "eu"}],
            "steps": [step("inventory"), deploy({"items": "steps.inventory.output.clusters", "maxParallel": 3,
                                                  "failFast": True, "key": "item.name"},
                                                 when="item.region == params.only && index < 20"),
                      step("report", "deploy",
                           **{"with": {"url": "https://r.example.com/${{ steps.deploy.output[0] }}"}})]}
    assert check(spec) == []


def test_a_literal_list_is_valid(check: Check) -> None:
    assert check({"steps": [step("inventory"), deploy({"items": [{"name": "eu"}, {"name": "us"}]})]}) == []


def test_items_that_are_neither_a_list_nor_cel_are_refused_with_the_fix(check: Check) -> None:
    assert found(check({"steps": [step("inventory"), deploy({"items": {"name": "eu"}})]})) == [(
        "spec.steps[1].forEach.items", "must be a list, e.g. [eu-west-1, us-east-2], or a CEL expression over params "
        "and steps that yields one, e.g. steps.inventory.output.clusters",
    )]


def test_a_literal_list_over_the_limit_is_refused_offline(check: Check) -> None:
    errors = check({"steps": [step("inventory"), deploy({"items": list(range(MAX_LOOP_ITEMS + 1))})]})
    assert ("spec.steps[1].forEach.items", f"lists {MAX_LOOP_ITEMS + 1} items; the limit is {MAX_LOOP_ITEMS}. "
            "Split the list across runs, or loop over batches of items") in found(errors)


def test_max_parallel_out_of_range_names_the_field_and_the_range(check: Check) -> None:
    for value in (0, MAX_LOOP_PARALLEL + 1):
        errors = check({"steps": [step("inventory"), deploy({"items": [1], "maxParallel": value})]})
        assert [e.field for e in errors] == ["spec.steps[1].forEach.maxParallel"]
        assert str(1 if value == 0 else MAX_LOOP_PARALLEL) in errors[0].message


def test_an_items_expression_reading_a_step_not_upstream_is_refused(check: Check) -> None:
    spec = {"steps": [step("inventory"), deploy({"items": "steps.report.output.clusters"}), step("report")]}
    assert found(check(spec)) == [(
        "spec.steps[1].forEach.items", "reads steps.report, which is not upstream of this step, so its output may "
        "not exist yet; add 'report' to needs (directly or through a step it needs)",
    )]


def test_item_and_index_outside_a_loop_are_refused_with_the_fix(check: Check) -> None:
    spec = {"steps": [step("inventory", **{"with": {"url": "https://x.example.com/${{ item }}"}},
                           when="index > 0")]}
    message = ("is defined only in a step with forEach (an instance's item and its index); add forEach to this "
               "step, or read params or steps")
    assert found(check(spec)) == [
        ("spec.steps[0].when", f"'index' {message}"), ("spec.steps[0].with.url", f"'item' {message}"),
    ]


def test_the_items_expression_itself_cannot_read_item(check: Check) -> None:
    errors = check({"steps": [step("inventory"), deploy({"items": "item.clusters"})]})
    assert [e.field for e in errors] == ["spec.steps[1].forEach.items"]
    assert errors[0].message.startswith("'item' is defined only in a step with forEach")


def test_reading_one_instance_from_another_step_is_refused_with_the_fix(check: Check) -> None:
    spec = {"steps": [step("inventory"), deploy({"items": [{"name": "eu"}]}),
                      step("report", "deploy", when="steps.deploy[0].output.ok")]}
    assert found(check(spec)) == [(
        "spec.steps[2].when", "steps.deploy[...] reads a step by index: another step cannot read one loop instance; "
        "read steps.deploy.output[0] (a loop's output lists its instances' outputs in item order)",
    )]


def test_a_key_that_does_not_compile_is_refused_at_the_key(check: Check) -> None:
    errors = check({"steps": [step("inventory"), deploy({"items": [1], "key": "item.name +"})]})
    assert [e.field for e in errors] == ["spec.steps[1].forEach.key"]
    assert errors[0].message.startswith("CEL does not compile")


def test_a_hostile_items_expression_is_refused_by_its_cost_offline(check: Check) -> None:
    nested = "params.xs.map(a, params.xs.map(b, params.xs.map(c, params.xs.map(d, a))))"
    spec = {"params": [{"name": "xs", "type": "array", "default": []}],
            "steps": [step("inventory"), deploy({"items": nested})]}
    errors = check(spec)
    assert [e.field for e in errors] == ["spec.steps[1].forEach.items"]
