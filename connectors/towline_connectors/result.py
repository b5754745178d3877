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
    RESULT_LIMIT_BYTES,
    Result,
    fit_result,
)

__all__ = ["EXIT_OK", "EXIT_PERMANENT", "EXIT_RETRYABLE", "EXIT_USAGE", "StepResult", "render_result"]


@dataclass(frozen=True)
class StepResult(Result):
    """The outcome of one step attempt, as the operator will read it."""

    @classmethod
    def failure(cls, error: ActionError, usage: dict[str, Any] | None = None) -> StepResult:
        return cls(False, None, error.error_class, error.message, error.retry_after_seconds, usage)

    @property
    def retryable(self) -> bool:
        return self.error_class in RETRYABLE_CLASSES

    def document(self) -> dict[str, Any]:
        return self.wire_form(self.retryable)


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
    return fit_result(result, lambda fitted: _dumps(redactor.redact_value(fitted.document())))
