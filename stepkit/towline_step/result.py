"""The result document a step written with the SDK leaves behind, rendered to fit the protocol's limits.

Every document passes through the redactor before it is rendered, and through
the protocol's own strict reader before it is written: what the SDK writes is
exactly what the operator will accept, never a truncated or refused document.
An output that does not fit RESULT_LIMIT_BYTES becomes an `output_too_large`
failure that says how big it was; a failure's message is cut to fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from towline_step.errors import StepError
from towline_step.protocol import (
    MAX_MESSAGE_CHARS,
    PROTOCOL_VERSION,
    RESULT_LIMIT_BYTES,
    RETRYABLE_CLASSES,
    ErrorClass,
    Result,
    fit_result,
    read_result_message,
)
from towline_step.redact import Redactor


@dataclass(frozen=True)
class Outcome(Result):
    """One attempt's outcome before it is rendered."""

    @classmethod
    def failure(cls, error_class: ErrorClass, message: str, retry_after_seconds: float | None = None) -> Outcome:
        return cls(ok=False, error_class=error_class, message=message, retry_after_seconds=retry_after_seconds)

    @classmethod
    def from_error(cls, error: StepError) -> Outcome:
        return cls.failure(error.error_class, error.message, error.retry_after_seconds)

    def document(self) -> dict[str, Any]:
        """The SDK's form: with `version`; a success says no error class or retry rule, a failure no output."""
        usage = self.usage or None
        if self.ok:
            said, retryable = replace(self, error_class=None, usage=usage), None
        else:
            said, retryable = replace(self, output=None, usage=usage), self.error_class in RETRYABLE_CLASSES
        return {"version": PROTOCOL_VERSION, **said.wire_form(retryable)}


def dumps(document: dict[str, Any]) -> str:
    """Compact JSON, UTF-8 as is (an escaped character would cost up to six bytes of the limit)."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def render(outcome: Outcome, redactor: Redactor) -> tuple[Outcome, str]:
    """The outcome as the text to write, redacted, within RESULT_LIMIT_BYTES and accepted by the strict reader."""
    outcome = _redacted(outcome, redactor)
    try:
        text = dumps(outcome.document())
    except ValueError as error:  # NaN or infinity in the output or the usage
        outcome = Outcome.failure(ErrorClass.PERMANENT, f"the step's output cannot be sent as JSON: {error}")
        text = dumps(outcome.document())
    size = len(text.encode("utf-8", "surrogatepass"))
    if outcome.ok and size > RESULT_LIMIT_BYTES:
        outcome = Outcome(
            ok=False, error_class=ErrorClass.OUTPUT_TOO_LARGE, usage=outcome.usage,
            message=f"the step's result document is {size} bytes, over the {RESULT_LIMIT_BYTES}-byte limit of a "
            "termination message; return less data (keep bulk data elsewhere and return a reference to it)",
        )
    outcome, text = _fitted(outcome)
    checked = read_result_message(text)
    if checked is None or checked.ok != outcome.ok or checked.error_class != outcome.error_class:
        # The reader refused what we meant to write (an output nested too deep, an integer past 64 bits):
        # report its reason rather than write a document the operator would turn into a vaguer failure.
        why = "not JSON" if checked is None else checked.message or "refused"
        outcome, text = _fitted(Outcome.failure(ErrorClass.PERMANENT, f"the step's output cannot be sent: {why}"))
    return outcome, text


def _redacted(outcome: Outcome, redactor: Redactor) -> Outcome:
    message = outcome.message
    if message is not None:
        # Redact before cutting: a value straddling the cut must not leave its prefix behind.
        # A lone surrogate (from a byte string decoded leniently) is not Unicode the reader accepts.
        message = redactor.redact(message).encode("utf-8", "replace").decode("utf-8")
        message = message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 1] + "…"
    return replace(
        outcome, message=message, output=redactor.redact_value(outcome.output),
        usage=None if outcome.usage is None else redactor.redact_value(outcome.usage),
    )


def _fitted(outcome: Outcome) -> tuple[Outcome, str]:
    return fit_result(outcome, lambda fitted: dumps(fitted.document()))
