"""The rules that map HTTP outcomes to error classes (the classes are the step protocol's).

The class decides what the operator does next (DESIGN.md, "Error classes"), so
the mapping lives in one place. This module never performs I/O and never puts a
response body or header value into a message without the caller redacting it.
"""

from __future__ import annotations

import email.utils
from collections.abc import Mapping

from towline_step.protocol import RETRYABLE_CLASSES, ErrorClass, clamp_delay_seconds

__all__ = ["RETRYABLE_CLASSES", "ActionError", "ErrorClass", "classify_http_status", "parse_retry_after"]


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
    """Seconds to wait from a `Retry-After` header (delta-seconds or HTTP-date), within the protocol's bounds.

    `now` is passed in so tests are deterministic. Unparseable values are
    ignored rather than guessed at: the engine then uses its own backoff. A
    server's value is clamped to [0, MAX_RETRY_AFTER_SECONDS]: `300000000000`
    or a date in the year 9999 means "a day", never a wake-up time past the calendar.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        # Compared as text first: float() of thousands of digits is inf, int() of them is refused.
        return clamp_delay_seconds(float(text[:20]) if len(text) <= 20 else float("inf"))
    try:
        when = email.utils.parsedate_to_datetime(text)
        seconds = when.timestamp() - now
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return clamp_delay_seconds(seconds)


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
