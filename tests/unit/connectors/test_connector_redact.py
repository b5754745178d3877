"""The redactor: secret values and their encodings never survive into emitted text."""

from __future__ import annotations

import io
import json
import urllib.parse

from towline_connectors.redact import PLACEHOLDER, RedactingStream, Redactor

SECRET = 'p@ss\\w0rd"é/+'


def test_raw_secret_is_replaced() -> None:
    assert Redactor([SECRET]).redact(f"token={SECRET};") == f"token={PLACEHOLDER};"


def test_escaped_and_quoted_forms_are_replaced() -> None:
    redactor = Redactor([SECRET])
    forms = [
        json.dumps(SECRET),
        repr(SECRET),
        repr(SECRET.encode()),
        urllib.parse.quote(SECRET, safe=""),
        urllib.parse.quote_plus(SECRET),
    ]
    for form in forms:
        assert SECRET not in redactor.redact(form)
        assert PLACEHOLDER in redactor.redact(form), form


def test_value_with_a_final_newline_is_also_redacted_without_it() -> None:
    assert Redactor(["tok-123\n"]).redact("Bearer tok-123") == f"Bearer {PLACEHOLDER}"


def test_each_line_of_a_multi_line_secret_is_redacted() -> None:
    key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END KEY-----\n"
    text = Redactor([key]).redact("line: MIIEvQIBADANBgkqhkiG9w0BAQEFAASC")
    assert text == f"line: {PLACEHOLDER}"


def test_longer_secret_is_replaced_whole_before_a_shorter_one_inside_it() -> None:
    redactor = Redactor(["abc", "abcdef"])
    assert redactor.redact("abcdef abc") == f"{PLACEHOLDER} {PLACEHOLDER}"


def test_blank_values_are_ignored() -> None:
    assert Redactor(["", "  \n"]).redact("nothing to hide") == "nothing to hide"


def test_structured_values_are_redacted_in_keys_strings_and_equal_numbers() -> None:
    redactor = Redactor(["s3cr3t", "424242"])
    value = {"s3cr3t-key": ["x s3cr3t y", 424242, 4242, True, None]}
    assert redactor.redact_value(value) == {f"{PLACEHOLDER}-key": [f"x {PLACEHOLDER} y", PLACEHOLDER, 4242, True, None]}


def test_stream_redacts_a_secret_split_across_writes() -> None:
    target = io.StringIO()
    stream = RedactingStream(target, Redactor(["hunter2-secret"]))
    stream.write("password is hunt")
    stream.write("er2-sec")
    stream.write("ret\nnext line")
    stream.flush()
    assert target.getvalue() == f"password is {PLACEHOLDER}\nnext line"


def test_secret_registered_later_is_redacted_from_then_on() -> None:
    redactor = Redactor()
    redactor.add("derived-basic-header")
    assert redactor.contains_secret("x derived-basic-header")
