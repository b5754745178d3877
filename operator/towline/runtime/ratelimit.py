"""How long a failed key waits before its next try, as client-go's DefaultControllerRateLimiter.

Per key: 5 ms doubling to a 1,000 s cap, forgotten on success. Overall: a
token bucket (10 per second, burst 100), so many keys failing at once (the API
server restarting) cannot turn into a storm of retries. The delay is the larger
of the two. Time is passed in, so tests use a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Protocol


class RateLimiter(Protocol):
    def when(self, key: Hashable) -> float:
        """Seconds to wait before retrying `key`; records one more failure of it."""

    def forget(self, key: Hashable) -> None:
        """`key` succeeded: its next failure starts from the base delay again."""

    def failures(self, key: Hashable) -> int:
        """Failures of `key` since it was last forgotten."""


class ItemExponentialRateLimiter:
    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self._base = base
        self._cap = cap
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        count = self._failures.get(key, 0)
        self._failures[key] = count + 1
        if count >= 64:  # 2**64 overflows any float arithmetic worth doing; it is the cap anyway
            return self._cap
        return float(min(self._base * 2**count, self._cap))

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class TokenBucketRateLimiter:
    """`rate` tokens per second, at most `burst` saved up; each retry reserves one."""

    def __init__(self, rate: float = 10.0, burst: int = 100, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self, key: Hashable) -> float:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        self._tokens -= 1.0
        # A negative balance is a reservation: the retry waits until the bucket refills to it.
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate

    def forget(self, key: Hashable) -> None:
        pass

    def failures(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    def __init__(self, *limiters: RateLimiter) -> None:
        self._limiters = limiters

    def when(self, key: Hashable) -> float:
        return max(limiter.when(key) for limiter in self._limiters)

    def forget(self, key: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def failures(self, key: Hashable) -> int:
        return max(limiter.failures(key) for limiter in self._limiters)


def default_controller_rate_limiter(clock: Callable[[], float] = time.monotonic) -> RateLimiter:
    return MaxOfRateLimiter(ItemExponentialRateLimiter(0.005, 1000.0), TokenBucketRateLimiter(10.0, 100, clock))
