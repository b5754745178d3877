"""The redactor: secret values and their encodings never survive into emitted text."""

from __future__ import annotations

import io
import json
import urllib.parse

import httpx

from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.httpcall import HttpReply
from towline_connectors.redact import PLACEHOLDER, RedactingStream, Redactor
from towline_connectors.result import StepResult, render_result

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


STRADDLING = "tok-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


def test_clip_redacts_before_cutting_so_a_straddling_secret_leaves_no_prefix() -> None:
    redactor = Redactor([STRADDLING])
    text = "x" * 290 + STRADDLING + " tail"
    clipped = redactor.clip(text, 300)
    assert STRADDLING[:6] not in clipped and clipped.startswith("x" * 290 + "[REDA")


def test_an_error_snippet_of_a_response_body_never_keeps_a_prefix_of_a_secret() -> None:
    body = ("e" * 280 + STRADDLING + "e" * 100).encode()
    reply = HttpReply(500, httpx.Headers(), body, httpx.URL("https://api.example.com/"), "GET api.example.com",
                      Redactor([STRADDLING]))
    snippet = reply.snippet()
    assert len(snippet) < 320 and STRADDLING[:4] not in snippet and PLACEHOLDER[:5] in snippet


def test_a_step_message_cut_to_its_limit_keeps_no_prefix_of_a_secret() -> None:
    message = "m" * 1490 + STRADDLING
    result, text = render_result(StepResult.failure(ActionError(ErrorClass.PERMANENT, message)),
                                 Redactor([STRADDLING]), "shrink")
    assert STRADDLING[:4] not in text and result.message is not None and STRADDLING[:4] not in result.message
