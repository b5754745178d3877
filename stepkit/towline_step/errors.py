"""The failures a step function raises on purpose, one per error class of the step protocol.

A step says *why* it failed by the exception it raises, and the class decides
what Towline does next (retry with backoff, wait for the provider's delay, stop,
ask for credential repair). Standard library only. The message of these errors
goes into the result document (after redaction), so it must say what went wrong
and how to fix it, and must never carry a credential value or bulk data.
"""

from __future__ import annotations

from typing import ClassVar

from towline_step.protocol import RETRYABLE_CLASSES, ErrorClass, clamp_delay_seconds


class StepError(Exception):
    """Base of the typed failures; raised itself it means `permanent`."""

    error_class: ClassVar[ErrorClass] = ErrorClass.PERMANENT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def retry_after_seconds(self) -> float | None:
        return None

    @property
    def retryable(self) -> bool:
        return self.error_class in RETRYABLE_CLASSES


class TransientError(StepError):
    """Worth retrying after a backoff: a timeout, a 5xx, a dropped connection."""

    error_class = ErrorClass.TRANSIENT


class RateLimitedError(StepError):
    """The provider asked to slow down; `retry_after_seconds` (its Retry-After) is a floor for the next attempt."""

    error_class = ErrorClass.RATE_LIMIT

    def __init__(self, message: str, retry_after_seconds: float | None = None) -> None:
        super().__init__(message)
        self._retry_after = None if retry_after_seconds is None else clamp_delay_seconds(retry_after_seconds)

    @property
    def retry_after_seconds(self) -> float | None:
        return self._retry_after


class PermanentError(StepError):
    """A retry would fail the same way: the thing asked for does not exist, or is refused for good."""

    error_class = ErrorClass.PERMANENT


class InvalidInputError(StepError):
    """The inputs are well-typed but unusable (a date in the past, an unknown account); never retried."""

    error_class = ErrorClass.VALIDATION


class AuthError(StepError):
    """The credential was refused or lacks a permission: the run pauses until someone repairs it."""

    error_class = ErrorClass.AUTH


class UnknownSideEffectError(StepError):
    """A mutating call may or may not have taken effect: someone must check before it is replayed."""

    error_class = ErrorClass.UNKNOWN_SIDE_EFFECT
