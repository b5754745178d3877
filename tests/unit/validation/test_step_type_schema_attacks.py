"""A step-type author's hostile JSON Schema: it fails the type or the step, never the operator.

Each schema here once stalled or killed the operator for every namespace: jsonschema's default registry
followed a `$ref` with a blocking `urlopen` (file:// read into messages, a URL fetched), a `pattern` ran
Python's backtracking `re`, and a deep schema raised RecursionError out of the check.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from towline.api.run import bounded_nesting_rule
from towline.validation.schemaguard import (
    MAX_CHECK_STEPS,
    MAX_PASS_STEPS,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_ITEMS,
    MAX_SCHEMA_VALUES,
    bounded_schema_work,
    local_references_rule,
)
from towline.validation.steptypes import StepImagePolicy, check_step_type, input_errors, output_errors

POLICY_FILE = Path(__file__).resolve().parents[3] / "charts/towline/templates/admission-policy-step-types.yaml"
CATASTROPHIC = r"^([a-zA-Z0-9]+\s?)*$"
"""Backtracks exponentially in Python's re on a near-match: 39 letters and a `!` take days."""
NEAR_MATCH = "a" * 39 + "!"
POLICY = StepImagePolicy(allowed_prefixes=("registry.example.com/team/",))


def with_input(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": schema}}


def step_type(inputs: dict[str, Any], outputs: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "registry.example.com/team/deploy:1", "inputs": inputs}
    if outputs is not None:
        spec["outputs"] = outputs
    return {"kind": "StepType", "metadata": {"name": "hostile", "namespace": "team"}, "spec": spec}


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP port that counts connections and answers each as HTTP with a schema, so a fetch would succeed."""
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []
    body = json.dumps({"type": "integer", "const": 7}).encode()

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                received.append(connection.recv(4096))
                connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    server.shutdown(socket.SHUT_RDWR)  # wakes the accept
    server.close()
    thread.join(timeout=5)


def test_a_file_ref_is_refused_naming_the_field_and_the_file_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "operator-file.json"
    secret.write_text(json.dumps({"const": "SECRET-FILE-CONTENT"}))
    schema = with_input({"$ref": secret.as_uri()})

    problems = check_step_type(step_type(schema), POLICY)
    assert isinstance(problems, list), problems
    assert problems[0].startswith("spec.inputs.properties.x.$ref: "), problems
    assert "#/$defs/<name>" in problems[0], problems

    # A run's snapshot from before the check (or a stale cache) reaches the engine: still nothing is read.
    for messages in (input_errors(schema, {"x": "anything"}, allow_templates=False),
                     output_errors(schema, {"x": "anything"})):
        assert messages and "points outside the schema" in messages[0], messages
        assert "SECRET-FILE-CONTENT" not in " ".join(messages), messages


def test_dev_zero_as_a_ref_returns_at_once_instead_of_reading_forever() -> None:
    messages = input_errors(with_input({"$ref": "file:///dev/zero"}), {"x": 1}, allow_templates=False)
    assert "points outside the schema" in messages[0], messages


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_remote_ref_is_refused_and_never_fetched(listener: tuple[int, list[bytes]], scheme: str) -> None:
    port, received = listener
    schema = with_input({"$ref": f"{scheme}://127.0.0.1:{port}/schema.json"})

    problems = check_step_type(step_type({"type": "object"}, outputs=schema), POLICY)
    assert isinstance(problems, list) and problems[0].startswith("spec.outputs.properties.x.$ref: "), problems
    assert "points outside the schema" in input_errors(schema, {"x": 1}, allow_templates=False)[0]
    assert "points outside the schema" in output_errors(schema, {"x": 1})[0]
    assert received == []


def test_a_relative_ref_under_a_remote_id_is_never_fetched(listener: tuple[int, list[bytes]]) -> None:
    port, received = listener
    schema = {"$id": f"http://127.0.0.1:{port}/base/", "type": "object",
              "properties": {"x": {"$ref": "other.json"}}}
    assert "points outside the schema" in input_errors(schema, {"x": 1}, allow_templates=False)[0]
    assert received == []


@pytest.mark.timeout(60, method="thread")  # on a backtracking engine this check never returns
@pytest.mark.parametrize("where", ["pattern", "patternProperties", "additionalProperties", "propertyNames"])
def test_a_catastrophic_pattern_on_a_40_character_input_is_answered_in_linear_time(where: str) -> None:
    schemas: dict[str, tuple[dict[str, Any], Any]] = {
        "pattern": (with_input({"type": "string", "pattern": CATASTROPHIC}), {"x": NEAR_MATCH}),
        "patternProperties": (with_input({"type": "object", "patternProperties": {CATASTROPHIC: {"type": "string"}}}),
                              {"x": {NEAR_MATCH: 1}}),
        "additionalProperties": (with_input({"type": "object", "patternProperties": {CATASTROPHIC: {}},
                                             "additionalProperties": False}), {"x": {NEAR_MATCH: 1}}),
        "propertyNames": (with_input({"type": "object", "propertyNames": {"pattern": CATASTROPHIC}}),
                          {"x": {NEAR_MATCH: 1}}),
    }
    schema, value = schemas[where]
    assert check_step_type(step_type(schema), POLICY) is not None
    messages = input_errors(schema, value, allow_templates=False)
    if where == "patternProperties":
        assert messages == [], messages  # it does not match, so the property is not checked against the subschema
    else:
        assert messages and messages[0].startswith("with.x"), messages
    assert input_errors(schema, {"x": "a" * 40} if where == "pattern" else {"x": {"a" * 40: "s"}},
                        allow_templates=False) == []


def test_a_pattern_that_needs_backtracking_is_refused_naming_the_field_and_the_fix() -> None:
    problems = check_step_type(step_type(with_input({"type": "string", "pattern": r"^(a+)\1$"})), POLICY)
    assert isinstance(problems, list), problems
    assert problems[0].startswith("spec.inputs.properties.x.pattern: not a pattern RE2 can run"), problems
    assert "backreferences" in problems[0], problems


def test_unevaluated_properties_next_to_pattern_properties_is_refused() -> None:
    schema = {"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    problems = check_step_type(step_type(schema), POLICY)
    assert isinstance(problems, list) and "use additionalProperties" in problems[0], problems


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize("levels", [MAX_SCHEMA_DEPTH, 5000])
def test_a_deep_schema_is_refused_naming_the_field_and_never_raises(levels: int) -> None:
    problems = check_step_type(step_type(nested(levels)), POLICY)
    assert isinstance(problems, list), problems
    assert problems[0].startswith("spec.inputs.properties.a.properties.a"), problems
    assert f"more than {MAX_SCHEMA_DEPTH} levels deep" in problems[0], problems
    assert "levels deep" in input_errors(nested(levels), {"a": {}}, allow_templates=False)[0]


def test_a_huge_schema_is_refused_naming_the_field() -> None:
    properties = {f"p{i}": {"type": "object", "properties": {f"q{j}": {"type": "string"} for j in range(200)}}
                  for i in range(20)}
    problems = check_step_type(step_type({"type": "object", "properties": properties}), POLICY)
    assert isinstance(problems, list), problems
    assert problems[0].startswith(f"spec.inputs: holds more than {MAX_SCHEMA_VALUES} values"), problems


def test_a_schema_that_fits_the_bounds_still_works() -> None:
    schema = with_input({"type": "string", "pattern": "^[a-z]+$", "maxLength": 8})
    assert not isinstance(check_step_type(step_type(nested(MAX_SCHEMA_DEPTH // 2 - 1)), POLICY), list)
    assert input_errors(schema, {"x": "ok"}) == []
    assert input_errors(schema, {"x": "NOT"})[0].startswith("with.x: 'NOT' does not match")


def exponential(levels: int) -> dict[str, Any]:
    """Each level refers twice to the next: 2**levels evaluations from a schema of 3 * levels values."""
    defs: dict[str, Any] = {f"a{i}": {"anyOf": [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]}
                            for i in range(levels)}
    defs[f"a{levels}"] = {"type": "string"}
    return {"$defs": defs, "type": "object", "properties": {"x": {"$ref": "#/$defs/a0"}}}


def test_exponential_work_through_local_refs_stops_at_the_check_budget() -> None:
    assert not isinstance(check_step_type(step_type(exponential(40)), POLICY), list)
    [message] = input_errors(exponential(40), {"x": 1}, allow_templates=False)
    assert f"took more than {MAX_CHECK_STEPS} steps (this check)" in message, message


def test_the_checks_of_one_pass_share_one_budget() -> None:
    schema = exponential(12)  # about 8,000 steps a check: each fits alone, five do not fit one pass
    assert MAX_CHECK_STEPS > 2 ** 12 > MAX_PASS_STEPS // 10
    with bounded_schema_work():
        results = [input_errors(schema, {"x": 1}, allow_templates=False) for _ in range(10)]
    assert any("took more than" in " ".join(result) and "all checks of this pass" in " ".join(result)
               for result in results), results


def test_a_ref_loop_is_a_message_not_a_recursion_error() -> None:
    schema = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}}
    [message] = input_errors(schema, {"x": 1}, allow_templates=False)
    assert "refers to itself without end" in message or "took more than" in message, message


def test_unique_items_keeps_json_schema_equality_and_stays_linear() -> None:
    schema = with_input({"type": "array", "uniqueItems": True})
    assert input_errors(schema, {"x": [1, 1.0]})[0].endswith("has non-unique elements")
    assert input_errors(schema, {"x": [{"a": [1, 2]}, {"a": [1, 2.0]}]})[0].endswith("has non-unique elements")
    assert input_errors(schema, {"x": [1, True, 0, False, None]}) == []
    assert input_errors(schema, {"x": [{"n": i} for i in range(20_000)]}) == []


@pytest.mark.parametrize("field", ["inputs", "outputs"])
def test_the_chart_refuses_remote_refs_and_deep_schemas_as_the_operator_does(field: str) -> None:
    text = POLICY_FILE.read_text()
    assert local_references_rule(f"object.spec.{field}", MAX_SCHEMA_DEPTH) in text
    assert bounded_nesting_rule(f"object.spec.{field}", MAX_SCHEMA_DEPTH, MAX_SCHEMA_ITEMS) in text
    assert len(local_references_rule("x", 32)) < 2 * len(local_references_rule("x", 16)) + 300
