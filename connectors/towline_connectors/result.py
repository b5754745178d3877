"""Writing the result document (towline_step.protocol, version 1) to the termination message; exit codes.

`{"ok", "output", "errorClass", "message", "retryable", "retryAfterSeconds",
"usage"}` (plus `missingSecrets` when the step's Secrets are not there), at
most RESULT_LIMIT_BYTES: an output that does not fit turns into
an `output_too_large` failure that says how big it was. This module must never
render a document without passing it through the redactor first.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from towline_connectors.errors import RETRYABLE_CLASSES, ActionError, ErrorClass
from towline_connectors.redact import Redactor
from towline_step.protocol import (
    EXIT_OK,
    EXIT_PERMANENT,
    EXIT_RETRYABLE,
    EXIT_USAGE,
    MAX_MESSAGE_CHARS,
    MISSING_SECRETS_FIELD,
    RESULT_LIMIT_BYTES,
    exit_code_for,
)

__all__ = ["EXIT_OK", "EXIT_PERMANENT", "EXIT_RETRYABLE", "EXIT_USAGE", "StepResult", "render_result"]


@dataclass(frozen=True)
class StepResult:
    """The outcome of one step attempt, as the operator will read it."""

    ok: bool
    output: Any = None
    error_class: ErrorClass | None = None
    message: str | None = None
    retry_after_seconds: float | None = None
    usage: dict[str, Any] | None = None
    missing_secrets: tuple[str, ...] = ()
    """Names (never values) of the Secrets the step names whose mount is empty; only with an `auth` failure."""

    @classmethod
    def failure(cls, error: ActionError, usage: dict[str, Any] | None = None) -> StepResult:
        return cls(False, None, error.error_class, error.message, error.retry_after_seconds, usage)

    @property
    def retryable(self) -> bool:
        return self.error_class in RETRYABLE_CLASSES

    @property
    def exit_code(self) -> int:
        return exit_code_for(None if self.ok else (self.error_class or ErrorClass.PERMANENT))

    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "ok": self.ok,
            "output": self.output,
            "errorClass": None if self.error_class is None else self.error_class.value,
            "message": self.message,
            "retryable": self.retryable,
            "retryAfterSeconds": self.retry_after_seconds,
            "usage": self.usage,
        }
        if self.missing_secrets:
            document[MISSING_SECRETS_FIELD] = list(self.missing_secrets)
        return document


def _dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=str)


def render_result(result: StepResult, redactor: Redactor, shrink_hint: str) -> tuple[StepResult, str]:
    """Redact the result and make it fit RESULT_LIMIT_BYTES; returns what was actually rendered."""
    if result.message is not None:
        # Redact before cutting: a secret straddling the cut would otherwise leave its prefix behind.
        # The protocol's cap, as the step kit's writer cuts it: the marker included, so the reader cuts nothing.
        result = dataclasses.replace(result, message=redactor.clip(result.message, MAX_MESSAGE_CHARS - 1))
    text = _dumps(redactor.redact_value(result.document()))
    size = len(text.encode())
    if size > RESULT_LIMIT_BYTES and result.ok:
        result = StepResult.failure(
            ActionError(
                ErrorClass.OUTPUT_TOO_LARGE,
                f"the step's result is {size} bytes, over the {RESULT_LIMIT_BYTES}-byte termination-message "
                f"limit; {shrink_hint}",
            ),
            usage=result.usage,
        )
        text = _dumps(redactor.redact_value(result.document()))
    while len(text.encode()) > RESULT_LIMIT_BYTES:
        if result.usage is not None:
            result = dataclasses.replace(result, usage=None)
        else:
            message = result.message or ""
            result = dataclasses.replace(result, output=None, message=message[: len(message) // 2] + "…")
        text = _dumps(redactor.redact_value(result.document()))
    return result, text
