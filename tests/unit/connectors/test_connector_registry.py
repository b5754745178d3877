"""Action metadata the operator reads: schemas, mutation, destinations, input validation, catalogue."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from towline_connectors import catalog
from towline_connectors.errors import ErrorClass
from towline_connectors.registry import ACTIONS, Destination, get_action, json_schemas, list_actions, validate_inputs
from towline_connectors.spec import (
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENCY_NATURAL,
    IDEMPOTENCY_NONE,
    ActionResult,
    ActionSpec,
)

BUILT_INS = {"http.request", "webhook.send", "notify.slack", "notify.email", "ai.chat", "data.transform",
             "code.python", "code.wasm"}


def spec(name: str) -> ActionSpec:
    found = get_action(name)
    assert found is not None
    return found


def test_every_built_in_action_is_registered() -> None:
    assert set(ACTIONS) == BUILT_INS
    assert [s.name for s in list_actions()] == sorted(BUILT_INS)


def test_unknown_action_is_none() -> None:
    assert get_action("ftp.upload") is None


@pytest.mark.parametrize(
    ("inputs", "mutating"),
    [
        ({}, False),
        ({"method": "GET"}, False),
        ({"method": "head"}, False),
        ({"method": "OPTIONS"}, False),
        ({"method": "POST"}, True),
        ({"method": "delete"}, True),
        ({"method": "${{ params.method }}"}, True),
    ],
)
def test_http_request_mutates_depending_on_the_method(inputs: dict[str, str], mutating: bool) -> None:
    assert spec("http.request").is_mutating(inputs) is mutating


def test_other_actions_declare_a_fixed_mutation() -> None:
    declared = {name: ACTIONS[name].is_mutating({}) for name in BUILT_INS - {"http.request"}}
    assert declared == {
        "webhook.send": True,
        "notify.slack": True,
        "notify.email": True,
        "ai.chat": False,
        "data.transform": False,
        "code.python": False,  # no ports: no network, so nothing outside the pod changes
        "code.wasm": False,
    }


def test_python_code_that_may_connect_counts_as_mutating() -> None:
    assert ACTIONS["code.python"].is_mutating({"ports": [443]})


@pytest.mark.parametrize(
    ("name", "inputs", "expected"),
    [
        ("http.request", {"url": "https://api.example.com/v1"}, [Destination("api.example.com", 443)]),
        ("http.request", {"url": "http://api.example.com:8080/x"}, [Destination("api.example.com", 8080)]),
        (
            "http.request",
            {"url": "https://crm.example.com/a?within=${{ params.days }}"},
            [Destination("crm.example.com", 443)],
        ),
        ("http.request", {"url": "https://${{ params.host }}/x"}, [Destination(None, 443), Destination(None, 80)]),
        ("http.request", {"url": "${{ steps.a.output.next }}"}, [Destination(None, 443), Destination(None, 80)]),
        ("webhook.send", {"url": "https://hooks.example.org/in"}, [Destination("hooks.example.org", 443)]),
        ("notify.slack", {"text": "hi"}, [Destination("hooks.slack.com", 443)]),
        ("notify.email", {"host": "smtp.example.com"}, [Destination("smtp.example.com", 587)]),
        ("notify.email", {"host": "smtp.example.com", "security": "tls"}, [Destination("smtp.example.com", 465)]),
        ("notify.email", {"host": "smtp.example.com", "port": 2525}, [Destination("smtp.example.com", 2525)]),
        ("ai.chat", {"baseUrl": "https://llm.example.com/v1"}, [Destination("llm.example.com", 443)]),
        ("data.transform", {"fields": {"a": "1"}}, []),
    ],
)
def test_destinations_come_from_inputs_without_network(
    name: str, inputs: dict[str, object], expected: list[Destination]
) -> None:
    assert spec(name).destinations(inputs) == expected


def test_credential_references_include_defaults() -> None:
    assert spec("notify.slack").credential_refs({"text": "x"}) == [("slack", "url")]
    assert spec("http.request").credential_refs({"auth": {"bearer": {"credential": "crm", "key": "token"}}}) == [
        ("crm", "token")
    ]
    assert spec("notify.email").credential_refs({"auth": {"credential": "smtp"}}) == [
        ("smtp", "username"),
        ("smtp", "password"),
    ]
    # A default slot the inputs leave out is read through the action's model (the pod mounts only these keys).
    assert spec("webhook.send").credential_refs({"url": "https://hooks.example.com", "payload": {}}) == [
        ("webhook", "signing-secret")
    ]


def test_metadata_uses_known_vocabularies() -> None:
    classes = {c.value for c in ErrorClass}
    for action in list_actions():
        assert action.idempotency in {IDEMPOTENCY_KEY_HEADER, IDEMPOTENCY_NATURAL, IDEMPOTENCY_NONE}
        assert set(action.default_retry.retry_on) <= classes
        assert action.default_retry.backoff in {"exponential", "fixed"}
        assert action.input_model.model_config.get("extra") == "forbid"


def test_what_an_action_leaves_undeclared_is_read_the_cautious_way() -> None:
    async def run(_inputs: object, _ctx: object) -> ActionResult:
        return ActionResult(output={})

    writes = ActionSpec(name="test.writes", summary="s", input_model=BaseModel, output_model=BaseModel, run=run)
    reads = ActionSpec(name="test.reads", summary="s", input_model=BaseModel, output_model=BaseModel, run=run,
                       mutating=False)
    assert (writes.credential, writes.mutating, writes.idempotency) == (None, True, IDEMPOTENCY_NONE)
    assert (writes.default_retry.limit, writes.default_retry.retry_on) == (0, ())
    assert (reads.mutating, reads.idempotency) == (False, IDEMPOTENCY_NATURAL)


def test_templates_are_valid_for_any_field_type() -> None:
    inputs = {
        "url": "${{ params.url }}",
        "method": "${{ params.method }}",
        "timeoutSeconds": "${{ params.timeout }}",
        "auth": "${{ params.auth }}",
        "json": "${{ steps.load.output.body }}",
        "query": {"limit": "${{ params.limit }}"},
    }
    assert validate_inputs("http.request", inputs) == []


def test_literal_problems_are_still_reported_next_to_templates() -> None:
    inputs = {"url": "${{ params.url }}", "timeoutSeconds": -1, "maxRedirects": "${{ params.n }}"}
    assert validate_inputs("http.request", inputs) == ["with.timeoutSeconds: Input should be greater than 0"]


def test_missing_required_field_names_the_field_and_the_fix() -> None:
    assert validate_inputs("http.request", {}) == ["with.url: required; add it"]


def test_unknown_field_suggests_checking_the_spelling() -> None:
    [problem] = validate_inputs("http.request", {"url": "https://a.example.com", "timeout": 5})
    assert problem.startswith("with.timeout: unknown field 'timeout'; remove it or fix the spelling (fields: ")
    assert "timeoutSeconds" in problem


def test_a_misspelt_input_is_refused_even_when_its_value_is_a_binding() -> None:
    # The name is wrong whatever the value resolves to; the editor schema refuses it too.
    [problem] = validate_inputs("http.request", {"url": "https://a.example.com", "urll": "${{ params.url }}"})
    assert problem.startswith("with.urll: unknown field 'urll'; remove it or fix the spelling")
    nested = validate_inputs("http.request", {"url": "https://a.example.com",
                                              "auth": {"bearer": {"credential": "api", "kye": "${{ params.k }}"}}})
    assert nested[0] == "with.auth.bearer.key: required; add it"
    assert nested[1].startswith("with.auth.bearer.kye: unknown field 'kye'")


def test_nested_problem_names_the_nested_path() -> None:
    problems = validate_inputs("http.request", {"url": "https://a.example.com", "auth": {"bearer": {"key": "t"}}})
    assert problems == ["with.auth.bearer.credential: required; add it"]


def test_unknown_action_lists_the_known_ones() -> None:
    [problem] = validate_inputs("ftp.upload", {})
    assert problem.startswith(
        "action 'ftp.upload' does not exist; use one of: ai.chat, code.python, code.wasm, data.transform")


def test_json_schemas_describe_inputs_and_outputs_of_every_action() -> None:
    schemas = json_schemas()
    assert set(schemas["actions"]) == BUILT_INS
    http_input = schemas["actions"]["http.request"]["input"]
    assert {"url", "method", "json", "timeoutSeconds"} <= set(http_input["properties"])
    assert http_input["required"] == ["url"]
    assert schemas["actions"]["ai.chat"]["output"]["properties"]["modelVersion"]
    json.dumps(schemas)  # serialisable as-is


def test_catalog_table_lists_every_action_under_a_header() -> None:
    lines = catalog.format_table().splitlines()
    assert lines[0].split() == ["ACTION", "MUTATES", "IDEMPOTENCY", "CREDENTIAL", "RETRY", "SUMMARY"]
    assert [line.split()[0] for line in lines[1:]] == sorted(BUILT_INS)
    assert "by method" in lines[1 + sorted(BUILT_INS).index("http.request")]


def test_catalog_json_flag_prints_the_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    assert catalog.main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schemas()


def test_catalog_without_flags_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert catalog.main([]) == 0
    assert capsys.readouterr().out == catalog.format_table()
