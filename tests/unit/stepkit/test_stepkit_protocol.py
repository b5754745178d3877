"""The step protocol's strict reader: each way a termination message can break the contract, and its clear answer."""

from __future__ import annotations

import json

import pytest

from towline_connectors.errors import ActionError
from towline_connectors.redact import Redactor
from towline_connectors.result import StepResult, render_result
from towline_step.protocol import (
    EXIT_OK,
    EXIT_PERMANENT,
    EXIT_RETRYABLE,
    EXIT_USAGE,
    MAX_MESSAGE_CHARS,
    MAX_RETRY_AFTER_SECONDS,
    RESULT_LIMIT_BYTES,
    ErrorClass,
    ResultDocument,
    exit_code_for,
    missing_result,
    read_result_message,
)
from towline_step.redact import Redactor as SdkRedactor
from towline_step.result import Outcome, render


def read(text: str) -> ResultDocument:
    document = read_result_message(text)
    assert document is not None
    return document


@pytest.mark.parametrize(
    ("message", "names"),
    [
        ('{"ok":"true","output":1}', "'ok' must be true or false, not a string"),
        ('{"ok":1}', "'ok' must be true or false, not a number"),
        ('{"output":1}', "lacks the field 'ok'"),
        ("[true]", "it is a list, not a JSON object"),
        ('{"ok":false,"retryable":"yes"}', "'retryable' must be true, false or null, not a string"),
        ('{"ok":false,"retryAfterSeconds":[1]}', "'retryAfterSeconds' must be a number of seconds or null, not a list"),
        ('{"ok":false,"retryAfterSeconds":true}', "must be a number of seconds or null, not a boolean"),
        ('{"ok":false,"retryAfterSeconds":NaN}', "it holds NaN, which JSON does not allow"),
        ('{"ok":false,"retryAfterSeconds":1e400}', "it holds the number 1e400, beyond what a double carries"),
        ('{"ok":true,"usage":[1]}', "'usage' must be an object, not a list"),
        ('{"ok":false,"errorClass":7}', "'errorClass' must be an error class name, not a number"),
        ('{"ok":false,"message":{"a":1}}', "'message' must be a string, not an object"),
        ('{"ok":false,"missingSecrets":"api"}', "'missingSecrets' must be a list of Secret names, not a string"),
        ('{"ok":true,"output":' + "1" * 30 + "}", "beyond 64 bits"),
        ('{"ok":true,"output":"\\ud800"}', "not valid Unicode"),
        ('{"ok":true,"output":' + "[" * 40 + "]" * 40 + "}", "deeper than 32 levels"),
        ("[" * 5000 + "]" * 5000, "bytes, over the 4096-byte limit"),
        ('{"ok":true,"version":2}', "'version' is 2; this operator reads version 1"),
    ],
)
def test_a_document_breaking_the_contract_is_a_permanent_failure_naming_why(message: str, names: str) -> None:
    document = read(message)
    assert (document.ok, document.error_class, document.retryable, document.output) == (
        False, ErrorClass.PERMANENT, False, None)
    assert names in (document.message or "")


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [(300_000_000_000, MAX_RETRY_AFTER_SECONDS), (2**62, MAX_RETRY_AFTER_SECONDS), (1.7e308, MAX_RETRY_AFTER_SECONDS),
     (-5, 0.0), (-1e300, 0.0), (12.5, 12.5), (None, None)],
)
def test_retry_after_is_clamped_to_zero_and_the_documented_maximum(retry_after: float | None, expected: float) -> None:
    document = read(json.dumps({"ok": False, "errorClass": "rate_limit", "retryAfterSeconds": retry_after}))
    assert (document.error_class, document.retry_after_seconds) == (ErrorClass.RATE_LIMIT, expected)


def test_an_unknown_error_class_is_permanent_and_says_so() -> None:
    document = read('{"ok":false,"errorClass":"please_retry_forever","message":"m","retryable":true}')
    assert document.error_class is ErrorClass.PERMANENT
    assert document.message == 'unknown error class "please_retry_forever" treated as permanent: m'


def test_a_failure_without_a_class_is_permanent() -> None:
    assert read('{"ok":false}').error_class is ErrorClass.PERMANENT


def test_text_that_is_not_json_is_left_to_the_caller() -> None:
    assert read_result_message("exec /runner: no such file or directory") is None


def test_what_the_runner_renders_reads_back_as_it_was_written() -> None:
    written = StepResult.failure(ActionError(ErrorClass.RATE_LIMIT, "slow down", retry_after_seconds=30.0))
    _, text = render_result(written, Redactor(), "return less")
    document = read(text)
    assert (document.ok, document.error_class, document.retryable, document.retry_after_seconds) == (
        False, ErrorClass.RATE_LIMIT, True, 30.0)
    _, text = render_result(StepResult(ok=True, output={"n": 1}, usage={"tokens": 3}), Redactor(), "return less")
    assert read(text) == ResultDocument(ok=True, output={"n": 1}, retryable=False, usage={"tokens": 3})


def test_the_runner_and_the_sdk_cut_a_long_message_alike_at_the_protocols_cap() -> None:
    long = "the provider said no. " * 200  # ASCII: the document fits the byte limit with the whole cap
    _, runner_text = render_result(StepResult.failure(ActionError(ErrorClass.PERMANENT, long)), Redactor(), "-")
    _, sdk_text = render(Outcome.failure(ErrorClass.PERMANENT, long), SdkRedactor())
    runner_message, sdk_message = read(runner_text).message, read(sdk_text).message
    assert runner_message == sdk_message == long[: MAX_MESSAGE_CHARS - 1] + "…"
    assert json.loads(runner_text)["message"] == runner_message  # the reader had nothing left to cut


def test_the_size_limit_is_the_runners() -> None:
    assert read_result_message('{"ok":true,"output":"' + "x" * (RESULT_LIMIT_BYTES - 21) + '"}') is not None


@pytest.mark.parametrize(("error_class", "code"), [
    (None, EXIT_OK), (ErrorClass.VALIDATION, EXIT_USAGE), (ErrorClass.TRANSIENT, EXIT_RETRYABLE),
    (ErrorClass.RATE_LIMIT, EXIT_RETRYABLE), (ErrorClass.TIMEOUT, EXIT_RETRYABLE), (ErrorClass.AUTH, EXIT_PERMANENT),
    (ErrorClass.PERMANENT, EXIT_PERMANENT), (ErrorClass.UNKNOWN_SIDE_EFFECT, EXIT_PERMANENT),
    (ErrorClass.OUTPUT_TOO_LARGE, EXIT_PERMANENT),
])
def test_each_error_class_has_one_exit_code(error_class: ErrorClass | None, code: int) -> None:
    assert exit_code_for(error_class) == code


def test_a_container_without_a_result_is_retried_only_when_it_exited_75() -> None:
    retried = missing_result(EXIT_RETRYABLE)
    assert (retried.ok, retried.error_class, retried.retryable) == (False, ErrorClass.TRANSIENT, True)
    assert "exited with code 75 without writing a result document" in (retried.message or "")
    for code in (EXIT_OK, EXIT_PERMANENT, EXIT_USAGE, 137, -15):
        failed = missing_result(code)
        assert (failed.ok, failed.error_class, failed.retryable) == (False, ErrorClass.PERMANENT, False)
