"""CEL values as JSON: one converter for `when`/bindings (operator) and `data.transform` (step pod)."""

from __future__ import annotations

import ast
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import cel
import pytest

from towline_connectors import netguard, wire
from towline_connectors.wire import duration_text, is_template, parse_rfc3339, rfc3339, to_json_value


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("null", None),
        ("true", True),
        ("-7", -7),
        ("7u", 7),
        ("2.5", 2.5),
        ("'text'", "text"),
        ("b'\\xff\\x00ok'", "/wBvaw=="),
        ("[1, 'a', null, [true]]", [1, "a", None, [True]]),
        ("{'a': 1, 'b': {'c': [2]}}", {"a": 1, "b": {"c": [2]}}),
        ("{1: 'one'}", {"1": "one"}),
        ("{true: 'yes', false: 'no'}", {"true": "yes", "false": "no"}),
        ("timestamp('2026-01-01T08:00:00Z')", "2026-01-01T08:00:00Z"),
        ("timestamp('2026-01-01T08:00:00.25Z')", "2026-01-01T08:00:00.250000Z"),
        ("timestamp('2026-01-01T10:00:00+02:00')", "2026-01-01T08:00:00Z"),
        ("duration('90s')", "90s"),
        ("duration('1.5s')", "1.5s"),
        ("duration('-1m')", "-60s"),
        ("duration('1us')", "0.000001s"),
        ("duration('100000h')", "360000000s"),
        ("type(1)", "int"),
        ("{'at': [timestamp('2026-01-01T08:00:00Z')], 'wait': duration('2m')}",
         {"at": ["2026-01-01T08:00:00Z"], "wait": "120s"}),
    ],
)
def test_every_cel_type_has_one_json_form(expression: str, expected: Any) -> None:
    assert to_json_value(cel.evaluate(expression, {})) == expected


def test_a_value_with_no_json_form_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="CEL returned a OptionalValue, which has no JSON form"):
        to_json_value(cel.evaluate("optional.of(1)", {}))


def test_duration_text_is_exact_where_floats_are_not() -> None:
    assert duration_text(timedelta(days=40, microseconds=1)) == "3456000.000001s"
    assert duration_text(timedelta(0)) == "0s"


def test_rfc3339_formats_in_utc_at_the_precision_asked() -> None:
    moment = datetime(2026, 1, 1, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339(moment) == "2026-01-01T08:00:00.123456Z"
    assert rfc3339(moment, timespec="seconds") == "2026-01-01T08:00:00Z"
    assert rfc3339(moment.replace(microsecond=0), timespec="microseconds") == "2026-01-01T08:00:00.000000Z"
    assert rfc3339(datetime(2026, 1, 1, 8)) == "2026-01-01T08:00:00Z"


@pytest.mark.parametrize(
    "text", ["2026-01-01T08:00:00Z", "2026-01-01T08:00:00z", "2026-01-01T10:00:00+02:00", "2026-01-01T08:00:00.000Z"]
)
def test_rfc3339_parses_z_and_offsets_to_the_same_instant(text: str) -> None:
    assert parse_rfc3339(text) == datetime(2026, 1, 1, 8, tzinfo=UTC)


def test_rfc3339_parse_refuses_what_is_not_a_time() -> None:
    with pytest.raises(ValueError, match="Invalid isoformat string"):
        parse_rfc3339("next tuesday")
    assert parse_rfc3339("2026-01-01T08:00:00").tzinfo is None


@pytest.mark.parametrize(("value", "expected"), [
    ("${{ params.url }}", True), ("https://x.test/${{ params.id }}", True), ("a ${{ unclosed", True),
    ("https://x.test/{{ id }}", False), ("$ {{ x }}", False), (None, False), (3, False), (["${{ x }}"], False),
])
def test_a_binding_is_a_string_holding_the_marker(value: object, expected: bool) -> None:
    assert is_template(value) is expected


@pytest.mark.parametrize("module", [wire, netguard], ids=lambda m: m.__name__)
def test_the_modules_the_operator_imports_need_only_the_standard_library(module: ModuleType) -> None:
    # The import contracts allow operator modules to import `wire` and `netguard` (the
    # NetworkPolicy except-list is the guard's own block list), so whatever they imported
    # would reach the operator unseen: they must stay standard library only.
    tree = ast.parse(Path(str(module.__file__)).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and {name.split(".")[0] for name in imported} <= sys.stdlib_module_names | {"__future__"}
