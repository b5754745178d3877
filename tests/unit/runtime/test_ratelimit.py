"""The retry delays of client-go's DefaultControllerRateLimiter, with a fake clock."""

from __future__ import annotations

import pytest

from towline.runtime.ratelimit import (
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    TokenBucketRateLimiter,
    default_controller_rate_limiter,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_failing_key_waits_twice_as_long_each_time_from_5ms() -> None:
    limiter = ItemExponentialRateLimiter()
    assert [limiter.when("k") for _ in range(5)] == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert limiter.failures("k") == 5


def test_the_backoff_stops_growing_at_the_cap() -> None:
    limiter = ItemExponentialRateLimiter(0.005, 1000.0)
    delays = [limiter.when("k") for _ in range(100)]
    assert max(delays) == 1000.0
    assert delays[-1] == 1000.0
    assert delays[17] < 1000.0 <= delays[18]  # 0.005 * 2**17 = 655 s; 2**18 would be 1310 s


def test_success_forgets_the_failures_of_that_key_only() -> None:
    limiter = ItemExponentialRateLimiter()
    for _ in range(4):
        limiter.when("a")
        limiter.when("b")
    limiter.forget("a")
    assert limiter.when("a") == pytest.approx(0.005)
    assert limiter.when("b") == pytest.approx(0.08)


def test_the_bucket_lets_a_burst_through_then_spaces_retries_at_its_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucketRateLimiter(rate=10.0, burst=3, clock=clock)
    assert [bucket.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    assert [bucket.when(i) for i in range(3, 6)] == pytest.approx([0.1, 0.2, 0.3])
    clock.now += 1.0  # ten tokens refilled, minus the three reserved, capped at the burst
    assert bucket.when("later") == 0.0


def test_the_default_limiter_takes_the_longer_of_per_key_and_overall_delay() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock)
    # 100 different keys fail at once: the burst covers them at the per-key 5 ms.
    assert {limiter.when(f"k{i}") for i in range(100)} == {0.005}
    # The 101st must wait for a token (1/10 s), longer than its own 5 ms.
    assert limiter.when("k100") == pytest.approx(0.1)


def test_max_of_forgets_in_every_limiter() -> None:
    first, second = ItemExponentialRateLimiter(1.0, 100.0), ItemExponentialRateLimiter(2.0, 100.0)
    limiter = MaxOfRateLimiter(first, second)
    assert [limiter.when("k") for _ in range(3)] == [2.0, 4.0, 8.0]
    limiter.forget("k")
    assert (first.failures("k"), second.failures("k")) == (0, 0)
