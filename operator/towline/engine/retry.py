"""When to try a failed step attempt again: exponential backoff with full jitter.

The jitter comes from a `random.Random` seeded from (run uid, step id,
attempt), never from global randomness, so a replay after a crash computes the
same delay and the same persisted wake-up time.
"""

from __future__ import annotations

import hashlib
import random

from towline.api.workflow import RetryPolicy
from towline_step.protocol import MAX_RETRY_AFTER_SECONDS, clamp_delay_seconds


def jitter_seed(run_uid: str, step_id: str, attempt: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{run_uid}/{step_id}/{attempt}".encode()).digest()[:8], "big")


def retry_delay_seconds(
    policy: RetryPolicy, failed_attempt: int, *, seed: int, retry_after_seconds: float | None = None
) -> float:
    """Seconds to wait before the attempt after `failed_attempt` (1-based).

    Exponential: full jitter, uniform(0, min(max, base * 2**(n-1))) (AWS's
    "full jitter", which spreads a thundering herd best). Fixed: `base`. A
    provider's Retry-After is a floor and wins even over the cap: retrying
    earlier than the provider asked only earns another rate-limit error. Whatever
    it says, the delay stays within [0, MAX_RETRY_AFTER_SECONDS] (the observer
    clamps it too), so the time it becomes is always one the calendar holds.
    """
    if policy.backoff == "fixed":
        delay = policy.base_delay_seconds
    else:
        exponent = min(failed_attempt - 1, 64)  # 2**64 * base already exceeds any cap
        ceiling = min(policy.max_delay_seconds, policy.base_delay_seconds * 2.0**exponent)
        delay = random.Random(seed).uniform(0.0, ceiling)  # noqa: S311 - jitter, not cryptography
    if retry_after_seconds is not None and retry_after_seconds > delay:
        # Compared before float(): an integer past a double's range would raise.
        asked = retry_after_seconds
        delay = MAX_RETRY_AFTER_SECONDS if asked >= MAX_RETRY_AFTER_SECONDS else float(asked)
    return clamp_delay_seconds(delay)


def may_retry(policy: RetryPolicy | None, failed_attempt: int, error_class: str, retryable: bool | None) -> bool:
    """A retry is allowed by the policy: attempts left, a listed error class, not marked final by the step."""
    if policy is None or retryable is False:
        return False
    return failed_attempt <= policy.limit and error_class in policy.retry_on
