"""Step.main(): one attempt read from the pod's files, one result document written, the protocol's exit code."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading

import pytest
from pydantic import BaseModel, Field
from stepkit_testkit import StepPod

from towline_step import (
    AuthError,
    Context,
    InvalidInputError,
    PermanentError,
    RateLimitedError,
    StepError,
    TransientError,
    UnknownSideEffectError,
    step,
)
from towline_step.protocol import (
    EXIT_OK,
    EXIT_PERMANENT,
    EXIT_RETRYABLE,
    EXIT_USAGE,
    MAX_RETRY_AFTER_SECONDS,
    PROTOCOL_VERSION_ENV,
    RESULT_LIMIT_BYTES,
    ErrorClass,
)


class Item(BaseModel):
    sku: str
    quantity: int = Field(ge=1)


class Order(BaseModel):
    customer: str
    items: list[Item] = []
    raise_: str | None = Field(default=None, alias="raise")
    size: int = 0


class Receipt(BaseModel):
    summary: str
    count: int


class Deep(BaseModel):
    tree: object


ERRORS: dict[str, StepError] = {
    "transient": TransientError("upstream answered 503"),
    "permanent": PermanentError("no such customer"),
    "validation": InvalidInputError("the customer is closed"),
    "auth": AuthError("token refused"),
    "rate_limit": RateLimitedError("slow down", retry_after_seconds=30),
    "unknown_side_effect": UnknownSideEffectError("the POST timed out"),
}


@step(name="orders", image="registry.example/orders:1", credentials={"api": ["token"]}, mutating=False)
def place(inputs: Order, ctx: Context) -> Receipt:
    if inputs.raise_ in ERRORS:
        raise ERRORS[inputs.raise_]
    if inputs.raise_ == "crash":
        {}["missing-key"]  # an unexpected KeyError, as a bug would raise
    if inputs.raise_ == "leak":
        token = ctx.credential("api", "token")
        print(f"calling with token {token}")
        ctx.logger.warning("token=%s", token)
        raise ValueError(f"server said: bad token {token}")
    if inputs.raise_ == "echo-secret":
        return Receipt(summary=ctx.credential("api", "token"), count=0)
    if inputs.raise_ == "invalid-output":
        return Receipt.model_construct(summary="x", count="many")
    if inputs.raise_ == "wrong-type":
        return "done"  # type: ignore[return-value]
    if inputs.raise_ == "exit":
        raise SystemExit(0)
    if inputs.raise_ == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(30)  # interrupted by the SDK's handler; never reaches its timeout
    if inputs.raise_ == "block":
        threading.Event().wait(30)  # the deadline's alarm interrupts it
    ctx.record_usage("items", len(inputs.items))
    return Receipt(summary=f"{inputs.customer}: {'x' * inputs.size}", count=len(inputs.items))


@step(name="payments", image="registry.example/payments:1")
def pay(inputs: Order, ctx: Context) -> Receipt:
    """Mutating, and sends no idempotency key: an interrupted attempt may have paid."""
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait(30)
    return Receipt(summary="paid", count=1)


def test_a_successful_attempt_writes_its_output_and_exits_0(pod: StepPod) -> None:
    pod.given({"customer": "acme", "items": [{"sku": "a", "quantity": 2}]})
    assert place.main(pod.env) == EXIT_OK
    assert pod.document() == {
        "version": 1, "ok": True, "output": {"summary": "acme: ", "count": 1}, "errorClass": None,
        "message": None, "retryable": None, "retryAfterSeconds": None, "usage": {"items": 1},
    }
    assert pod.read().ok


def test_inputs_that_break_the_model_are_a_validation_failure_naming_each_field(pod: StepPod) -> None:
    pod.given({"items": [{"sku": "a", "quantity": 0}, {"quantity": "two"}]})
    assert place.main(pod.env) == EXIT_USAGE
    result = pod.read()
    assert (result.error_class, result.retryable) == (ErrorClass.VALIDATION, False)
    assert "with.customer: Field required" in (result.message or "")
    assert "with.items[0].quantity: Input should be greater than or equal to 1" in (result.message or "")
    assert "with.items[1].sku: Field required" in (result.message or "")
    assert "'two'" not in (result.message or "")  # names the field, never echoes the value


def test_a_missing_inputs_file_is_a_validation_failure_naming_the_path(pod: StepPod) -> None:
    assert place.main(pod.env) == EXIT_USAGE
    result = pod.read()
    assert result.error_class is ErrorClass.VALIDATION
    assert str(pod.inputs_path) in (result.message or "") and "does not exist" in (result.message or "")


@pytest.mark.parametrize(("text", "says"), [
    ('{"customer": "acme",', "is not valid JSON (line 1, column 21)"),
    ('["acme"]', "must hold a JSON object (the step's `with`), not list"),
    ("", "is not valid JSON"),
])
def test_inputs_that_are_not_a_json_object_are_a_validation_failure(pod: StepPod, text: str, says: str) -> None:
    pod.inputs_path.write_text(text)
    assert place.main(pod.env) == EXIT_USAGE
    assert says in (pod.read().message or "")


@pytest.mark.parametrize(("raised", "error_class", "exit_code"), [
    ("transient", ErrorClass.TRANSIENT, EXIT_RETRYABLE),
    ("rate_limit", ErrorClass.RATE_LIMIT, EXIT_RETRYABLE),
    ("permanent", ErrorClass.PERMANENT, EXIT_PERMANENT),
    ("validation", ErrorClass.VALIDATION, EXIT_USAGE),
    ("auth", ErrorClass.AUTH, EXIT_PERMANENT),
    ("unknown_side_effect", ErrorClass.UNKNOWN_SIDE_EFFECT, EXIT_PERMANENT),
])
def test_each_typed_error_becomes_its_error_class_and_exit_code(
    pod: StepPod, raised: str, error_class: ErrorClass, exit_code: int
) -> None:
    pod.given({"customer": "acme", "raise": raised})
    assert place.main(pod.env) == exit_code
    document = pod.document()
    assert (document["ok"], document["errorClass"], document["message"]) == (False, error_class.value,
                                                                             ERRORS[raised].message)
    assert document["retryable"] is (exit_code == EXIT_RETRYABLE)
    assert document["output"] is None


def test_a_rate_limit_carries_the_providers_delay_clamped_to_the_protocols_maximum(pod: StepPod) -> None:
    pod.given({"customer": "acme", "raise": "rate_limit"})
    place.main(pod.env)
    assert pod.document()["retryAfterSeconds"] == 30
    assert RateLimitedError("x", retry_after_seconds=1e12).retry_after_seconds == MAX_RETRY_AFTER_SECONDS
    assert RateLimitedError("x", retry_after_seconds=float("nan")).retry_after_seconds == 0


def test_an_unexpected_exception_is_permanent_naming_its_type_without_a_traceback(
    pod: StepPod, capsys: pytest.CaptureFixture[str]
) -> None:
    pod.given({"customer": "acme", "raise": "crash"})
    assert place.main(pod.env) == EXIT_PERMANENT
    message = pod.read().message or ""
    assert message.startswith("orders raised an unexpected KeyError: 'missing-key'")
    assert "Traceback" not in message and ".py" not in message
    assert "Traceback (most recent call last)" in capsys.readouterr().err  # the log keeps it for the author


def test_exit_inside_the_step_function_still_leaves_a_result(pod: StepPod) -> None:
    pod.given({"customer": "acme", "raise": "exit"})
    assert place.main(pod.env) == EXIT_PERMANENT
    assert "unexpected SystemExit" in (pod.read().message or "")


def test_a_credential_value_never_reaches_the_logs_or_the_result(
    pod: StepPod, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "tok-9f8e7d6c5b4a"
    pod.credential("api", "token", secret).given({"customer": "acme", "raise": "leak"})
    assert place.main(pod.env) == EXIT_PERMANENT
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err + pod.raw_result()
    assert "calling with token [REDACTED]" in captured.out
    assert "token=[REDACTED]" in captured.err
    assert "bad token [REDACTED]" in (pod.read().message or "")


def test_an_output_carrying_a_credential_value_is_redacted(pod: StepPod) -> None:
    pod.credential("api", "token", "tok-1234567890").given({"customer": "acme", "raise": "echo-secret"})
    assert place.main(pod.env) == EXIT_OK
    assert pod.document()["output"] == {"summary": "[REDACTED]", "count": 0}


def test_an_output_over_the_limit_fails_clearly_and_the_document_still_fits(pod: StepPod) -> None:
    pod.given({"customer": "acme", "size": 5000})
    assert place.main(pod.env) == EXIT_PERMANENT
    raw = pod.raw_result()
    assert len(raw.encode()) <= RESULT_LIMIT_BYTES
    result = pod.read()
    assert (result.error_class, result.output) == (ErrorClass.OUTPUT_TOO_LARGE, None)
    assert "bytes, over the 4096-byte limit" in (result.message or "")


def test_multibyte_output_counts_bytes_not_characters(pod: StepPod) -> None:
    pod.given({"customer": "é" * 2040})  # 2040 characters, 4080 bytes: with the rest, over the limit
    assert place.main(pod.env) == EXIT_PERMANENT
    assert pod.read().error_class is ErrorClass.OUTPUT_TOO_LARGE


@pytest.mark.parametrize(("raised", "says"), [
    ("invalid-output", "the step's output is invalid: output.count: Input should be a valid integer"),
    ("wrong-type", "orders returned str, not its output model Receipt"),
])
def test_an_output_that_breaks_the_output_model_is_permanent(pod: StepPod, raised: str, says: str) -> None:
    pod.given({"customer": "acme", "raise": raised})
    assert place.main(pod.env) == EXIT_PERMANENT
    assert says in (pod.read().message or "")


def test_sigterm_stops_a_step_that_does_not_mutate_as_a_timeout(pod: StepPod) -> None:
    pod.given({"customer": "acme", "raise": "sigterm"})
    assert place.main(pod.env) == EXIT_RETRYABLE
    result = pod.read()
    assert result.error_class is ErrorClass.TIMEOUT and "was stopped (SIGTERM" in (result.message or "")


def test_sigterm_stops_a_mutating_step_without_idempotency_key_as_an_unknown_side_effect(pod: StepPod) -> None:
    pod.given({"customer": "acme"})
    assert pay.main(pod.env) == EXIT_PERMANENT
    assert pod.read().error_class is ErrorClass.UNKNOWN_SIDE_EFFECT


def test_the_deadline_stops_the_function_before_the_pod_is_killed(pod: StepPod) -> None:
    pod.env["TOWLINE_DEADLINE_SECONDS"] = "0.2"  # the function gets 0.18 s of it
    pod.given({"customer": "acme", "raise": "block"})
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGALRM)
    assert place.main(pod.env) == EXIT_RETRYABLE
    result = pod.read()
    assert result.error_class is ErrorClass.TIMEOUT and "hit its deadline" in (result.message or "")
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGALRM)) == handlers
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize(("name", "value", "says"), [
    ("TOWLINE_DEADLINE_SECONDS", "soon", "TOWLINE_DEADLINE_SECONDS must be a positive number of seconds"),
    ("TOWLINE_DEADLINE_SECONDS", "inf", "TOWLINE_DEADLINE_SECONDS must be a positive number of seconds"),
    ("TOWLINE_ALLOW_HOSTS", "api.example.test", "TOWLINE_ALLOW_HOSTS must be a JSON list of host names"),
    (PROTOCOL_VERSION_ENV, "2", "this step kit speaks step protocol 1"),
])
def test_a_malformed_environment_is_a_validation_failure_naming_the_variable(
    pod: StepPod, name: str, value: str, says: str
) -> None:
    pod.given({"customer": "acme"}).env[name] = value
    assert place.main(pod.env) == EXIT_USAGE
    assert says in (pod.read().message or "")


def test_a_result_path_that_cannot_be_written_is_logged_and_the_exit_code_still_says_what_happened(
    pod: StepPod, capsys: pytest.CaptureFixture[str]
) -> None:
    pod.given({"customer": "acme", "raise": "transient"}).env["TOWLINE_RESULT_PATH"] = str(pod.root / "no" / "dir")
    assert place.main(pod.env) == EXIT_RETRYABLE
    assert "could not write the result document" in capsys.readouterr().err


def test_main_restores_the_process_streams_and_logging(pod: StepPod) -> None:
    before = (sys.stdout, sys.stderr, list(logging.getLogger().handlers))
    place.main(pod.given({"customer": "acme"}).env)
    assert (sys.stdout, sys.stderr, list(logging.getLogger().handlers)) == before


def test_a_document_is_written_even_when_the_output_is_nested_past_the_protocols_depth(pod: StepPod) -> None:
    nested: object = "leaf"
    for _ in range(40):
        nested = [nested]

    @step(name="deep", image="registry.example/deep:1")
    def deep(inputs: Order, ctx: Context) -> Deep:
        return Deep(tree=nested)

    pod.given({"customer": "acme"})
    assert deep.main(pod.env) == EXIT_PERMANENT
    assert "nests arrays or objects deeper than 32 levels" in (pod.read().message or "")
    assert json.loads(pod.raw_result())["ok"] is False
