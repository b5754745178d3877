"""The step graph: ids, needs, cycles, step kinds, onFailure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from towline.validation.graph import find_cycles

Check = Callable[[dict[str, Any]], list[Any]]


def step(step_id: str, *needs: str, **extra: Any) -> dict[str, Any]:
    body = {"id": step_id, "action": "http.request", "with": {"url": "https://api.example.com/x"}, **extra}
    if needs:
        body["needs"] = list(needs)
    return body


def messages(errors: list[Any]) -> list[str]:
    return [f"{e.field}: {e.message}" for e in errors]


def test_the_design_example_is_valid(check: Check) -> None:
    spec = {
        "params": [{"name": "threshold_days", "type": "integer", "default": 90}],
        "steps": [
            step("load_accounts", credentials={"crm": "crm-api"},
                 **{"with": {"url": "https://crm.example.com/a?d=${{ params.threshold_days }}",
                             "auth": {"bearer": {"credential": "crm", "key": "token"}}}}),
            {"id": "review", "needs": ["load_accounts"], "when": "size(steps.load_accounts.output.body.a) > 0",
             "approval": {"message": "Create ${{ size(steps.load_accounts.output.body.a) }} tasks?"}},
            step("create_tasks", "review", **{"with": {"url": "https://t.example.com",
                                                      "json": "${{ steps.load_accounts.output.body.a }}"}}),
        ],
        "finally": [{"id": "tell_ops", "action": "notify.slack", "credentials": {"slack": "ops-slack"},
                     "with": {"text": "${{ run.phase }}: ${{ run.name }} after ${{ steps.create_tasks.phase }}"}}],
    }
    assert check(spec) == []


def test_a_cycle_in_needs_is_named_at_its_first_step(check: Check) -> None:
    errors = check({"steps": [step("a", "b"), step("b", "a")]})
    assert messages(errors) == ["spec.steps[0].needs: needs form a cycle: a -> b -> a; remove one of these needs"]


def test_a_longer_cycle_is_reported_once(check: Check) -> None:
    errors = check({"steps": [step("start"), step("c", "b"), step("a", "c", "start"), step("b", "a")]})
    assert [e.message for e in errors] == ["needs form a cycle: a -> c -> b -> a; remove one of these needs"]


def test_find_cycles_finds_each_distinct_cycle() -> None:
    assert find_cycles({"a": ["a"], "b": ["c"], "c": ["b"], "d": ["b"]}) == [["a"], ["b", "c"]]


def test_an_unknown_need_suggests_the_close_match(check: Check) -> None:
    errors = check({"steps": [step("load_accounts"), step("review", "load_acounts")]})
    assert messages(errors) == [
        "spec.steps[1].needs[0]: 'load_acounts' is not a step id; did you mean 'load_accounts'?"
    ]


def test_a_step_cannot_need_a_finally_step(check: Check) -> None:
    errors = check({"steps": [step("a", "notify")], "finally": [step("notify")]})
    assert errors[0].field == "spec.steps[0].needs[0]"
    assert "finally step" in errors[0].message and "remove it from needs" in errors[0].message


def test_finally_steps_may_need_steps_and_each_other(check: Check) -> None:
    assert check({"steps": [step("a")], "finally": [step("f1", "a"), step("f2", "f1")]}) == []


def test_compensations_need_nothing(check: Check) -> None:
    errors = check({"steps": [step("a", onFailure="undo")], "compensations": [step("undo", "a")]})
    assert messages(errors) == [
        "spec.compensations[0].needs: a compensation starts as soon as a failed step names it in onFailure; "
        "remove needs"
    ]


def test_ids_are_unique_across_steps_finally_and_compensations(check: Check) -> None:
    errors = check({"steps": [step("a"), step("a")], "finally": [step("b")], "compensations": [step("b")]})
    assert messages(errors) == [
        "spec.steps[1].id: 'a' is already the id of spec.steps[0]; "
        "step ids must be unique across steps, finally and compensations",
        "spec.compensations[0].id: 'b' is already the id of spec.finally[0]; "
        "step ids must be unique across steps, finally and compensations",
    ]


def test_ids_ending_like_inserted_gates_are_reserved(check: Check) -> None:
    errors = check({"steps": [step("deploy__approval")]})
    assert errors[0].field == "spec.steps[0].id" and "reserved" in errors[0].message


def test_a_step_needs_exactly_one_kind(check: Check) -> None:
    errors = check({"steps": [{"id": "a"}, {**step("b"), "wait": {"duration": "5m"}}]})
    assert messages(errors) == [
        "spec.steps[0]: a step needs exactly one of action, approval, wait or workflow; it has none",
        "spec.steps[1]: a step needs exactly one of action, approval, wait or workflow; it has action and wait",
    ]


def test_with_and_credentials_belong_to_action_steps(check: Check) -> None:
    errors = check({"steps": [{"id": "a", "wait": {"duration": "1m"}, "with": {"x": 1}, "credentials": {"c": "s"}}]})
    assert [e.field for e in errors] == ["spec.steps[0].credentials", "spec.steps[0].with"]


def test_an_unknown_action_suggests_and_lists_known_ones(check: Check) -> None:
    errors = check({"steps": [{"id": "a", "action": "http.reqest", "with": {"url": "https://x"}}]})
    assert messages(errors) == ["spec.steps[0].action: unknown action 'http.reqest'; did you mean 'http.request'?"]
    errors = check({"steps": [{"id": "a", "action": "ftp.upload"}]})
    assert errors[0].message == "unknown action 'ftp.upload'; known: ai.chat, http.request, notify.slack"


def test_connector_input_errors_point_at_with(check: Check) -> None:
    errors = check({"steps": [{"id": "a", "action": "http.request", "with": {"method": "GET"}}]})
    assert messages(errors) == ["spec.steps[0].with.url: required; give the absolute http(s) URL to call"]
    errors = check({"steps": [{"id": "a", "action": "ai.chat", "with": {"messages": "hi"}}]})
    assert messages(errors) == ["spec.steps[0].with: messages must be a list"]


def test_on_failure_must_name_a_compensation(check: Check) -> None:
    errors = check({"steps": [step("a", onFailure="rollbak")], "compensations": [step("rollback")]})
    assert messages(errors) == [
        "spec.steps[0].onFailure: 'rollbak' is neither fail, continue nor the id of a step under "
        "spec.compensations; did you mean 'rollback'?"
    ]


def test_on_failure_naming_a_main_step_says_where_to_move_it(check: Check) -> None:
    errors = check({"steps": [step("a", onFailure="b"), step("b")]})
    assert errors[0].message.endswith("'b' is under spec.steps: move it under spec.compensations")


def test_only_main_steps_name_compensations(check: Check) -> None:
    errors = check({"steps": [step("a", onFailure="undo")], "finally": [step("f", onFailure="undo")],
                    "compensations": [step("undo", onFailure="undo")]})
    assert [e.field for e in errors] == ["spec.finally[0].onFailure", "spec.compensations[0].onFailure"]


def test_errors_come_in_manifest_order(check: Check) -> None:
    errors = check({
        "params": [{"name": "n", "type": "integer", "default": "x"}],
        "steps": [step(f"s{i}", "missing") for i in range(12)],
        "finally": [{"id": "f"}],
    })
    fields = [e.field for e in errors]
    assert fields[0] == "spec.params[0].default"
    assert fields[1:3] == ["spec.steps[0].needs[0]", "spec.steps[1].needs[0]"]
    assert fields[-3:] == ["spec.steps[10].needs[0]", "spec.steps[11].needs[0]", "spec.finally[0]"]
