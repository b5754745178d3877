"""The step kit's redactor: a credential value is replaced in every form it takes in text."""

from __future__ import annotations

import io
import json
import urllib.parse

from towline_step.redact import PLACEHOLDER, RedactingStream, Redactor

SECRET = 'p@ss "w/ord"+1'


def redactor() -> Redactor:
    scrub = Redactor()
    scrub.add(SECRET)
    return scrub


def test_raw_json_repr_and_url_forms_are_redacted() -> None:
    scrub = redactor()
    for text in (SECRET, json.dumps({"k": SECRET}), repr(SECRET), urllib.parse.quote(SECRET, safe=""),
                 urllib.parse.quote_plus(SECRET)):
        assert SECRET not in scrub.redact(text)
        assert PLACEHOLDER in scrub.redact(text)


def test_each_long_line_of_a_multiline_key_is_redacted_on_its_own() -> None:
    scrub = Redactor()
    scrub.add("-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END KEY-----")
    assert scrub.redact("line: MIIEvQIBADANBgkqhkiG9w0B") == f"line: {PLACEHOLDER}"


def test_blank_values_are_ignored_rather_than_matching_everywhere() -> None:
    scrub = Redactor()
    scrub.add("   ")
    scrub.add("")
    assert scrub.redact("text stays") == "text stays"


def test_json_values_are_scrubbed_in_keys_strings_and_equal_numbers() -> None:
    scrub = Redactor()
    scrub.add("424242")
    assert scrub.redact_value({"pin 424242": [424242, "x424242", 7, True, None]}) == {
        f"pin {PLACEHOLDER}": [PLACEHOLDER, f"x{PLACEHOLDER}", 7, True, None]
    }


def test_the_stream_redacts_a_value_written_in_pieces() -> None:
    target = io.StringIO()
    stream = RedactingStream(target, redactor())
    for piece in ("token: p@ss ", '"w/or', 'd"+1', " end\nnext"):
        stream.write(piece)
    assert target.getvalue() == f"token: {PLACEHOLDER} end\n"
    stream.flush()
    assert target.getvalue().endswith("next")
