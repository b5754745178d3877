"""Error classes every action reports, and the rules that map HTTP outcomes to them.

The class decides what the operator does next (DESIGN.md, "Error classes"), so
the mapping lives in one place. This module never performs I/O and never puts a
response body or header value into a message without the caller redacting it.
"""

from __future__ import annotations

import email.utils
import enum
from collections.abc import Mapping


class ErrorClass(enum.StrEnum):
    """What went wrong, in the vocabulary the engine's retry policy understands."""

    VALIDATION = "validation"
    AUTH = "auth"
    RATE_LIMIT = "rate_limit"
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    UNKNOWN_SIDE_EFFECT = "unknown_side_effect"
    OUTPUT_TOO_LARGE = "output_too_large"
    TIMEOUT = "timeout"


# A deadline hit before anything left the pod is as safe to retry as a transient
# failure; everything else needs a person or a reconciliation first.
RETRYABLE_CLASSES = frozenset({ErrorClass.RATE_LIMIT, ErrorClass.TRANSIENT, ErrorClass.TIMEOUT})


class ActionError(Exception):
    """An action failed in a way the runner reports as a result, not as a crash."""

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.retry_after_seconds = retry_after_seconds

    @property
    def retryable(self) -> bool:
        return self.error_class in RETRYABLE_CLASSES


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a `Retry-After` header (delta-seconds or HTTP-date).

    `now` is passed in so tests are deterministic. Unparseable values are
    ignored rather than guessed at: the engine then uses its own backoff.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def classify_http_status(
    status: int,
    headers: Mapping[str, str],
    *,
    now: float,
    what: str,
) -> ActionError | None:
    """The error class for a final HTTP status, or None when it is a success.

    `what` names the call in the message ("POST api.example.com"). 5xx stays
    transient even for mutating requests: the server answered, and mutating
    requests carry an Idempotency-Key, so a replay is the provider's to dedupe.
    """
    if status < 400:
        return None
    retry_after = parse_retry_after(headers.get("retry-after"), now)
    if status == 429:
        return ActionError(
            ErrorClass.RATE_LIMIT,
            f"{what} was rate limited (HTTP 429)" + _after(retry_after),
            retry_after_seconds=retry_after,
        )
    if status in (401, 403):
        return ActionError(
            ErrorClass.AUTH,
            f"{what} was refused with HTTP {status}: check the credential and its permissions",
        )
    if status == 408 or status >= 500:
        return ActionError(
            ErrorClass.TRANSIENT,
            f"{what} failed with HTTP {status}" + _after(retry_after),
            retry_after_seconds=retry_after,
        )
    return ActionError(ErrorClass.PERMANENT, f"{what} failed with HTTP {status}")


def _after(retry_after: float | None) -> str:
    return "" if retry_after is None else f"; the server asked to retry after {retry_after:g}s"
