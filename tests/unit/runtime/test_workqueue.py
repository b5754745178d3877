"""The work queue: de-duplication, per-key backoff, forget on success, a bounded retry budget."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from towline.k8s.client import ApiError
from towline.runtime.ratelimit import ItemExponentialRateLimiter
from towline.runtime.workqueue import STALE_ENTRIES_KEPT, TRANSIENT_BACKOFF_CAP, WorkQueue

Key = tuple[str, str]
T = TypeVar("T")
RUN = ("team", "run-1")


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def run(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(body())


class Recorder:
    def __init__(self, failing: set[Key] | None = None) -> None:
        self.processed: list[Key] = []
        self.failing = failing or set()
        self.gave_up: list[tuple[Key, int, str]] = []

    async def process(self, key: Key) -> None:
        self.processed.append(key)
        if key in self.failing:
            raise RuntimeError(f"{key[1]} is poison")

    async def give_up(self, key: Key, attempts: int, error: BaseException) -> None:
        self.gave_up.append((key, attempts, str(error)))


def queue_with(clock: FakeClock, max_retries: int = 3) -> WorkQueue:
    return WorkQueue("test", max_retries=max_retries, rate_limiter=ItemExponentialRateLimiter(), clock=clock)


def test_a_key_added_twice_while_waiting_is_processed_once() -> None:
    async def body() -> None:
        queue, recorder = queue_with(FakeClock()), Recorder()
        queue.add(RUN)
        queue.add(RUN)
        assert len(queue) == 1
        await queue.process_one(recorder.process, recorder.give_up)
        assert recorder.processed == [RUN]
        assert len(queue) == 0

    run(body)


def test_a_key_added_while_it_is_processed_is_processed_once_more_afterwards() -> None:
    async def body() -> None:
        queue, recorder = queue_with(FakeClock()), Recorder()

        async def process(key: Key) -> None:
            await recorder.process(key)
            queue.add(key)  # a watch event arrives mid-pass
            assert len(queue) == 0, "not handed to a second worker while in flight"

        queue.add(RUN)
        await queue.process_one(process, recorder.give_up)
        assert len(queue) == 1

    run(body)


def test_a_failed_pass_is_retried_after_an_exponentially_growing_delay() -> None:
    async def body() -> None:
        clock = FakeClock()
        queue, recorder = queue_with(clock, max_retries=10), Recorder(failing={RUN})
        queue.add(RUN)
        waits = []
        for _ in range(4):
            await queue.process_one(recorder.process, recorder.give_up)
            assert len(queue) == 0, "a failed key is not ready again at once"
            wait = queue.promote_due()
            assert wait is not None
            waits.append(wait)
            clock.now += wait
            assert queue.promote_due() is None
            assert len(queue) == 1
        assert waits == pytest.approx([0.005, 0.01, 0.02, 0.04])

    run(body)


def test_success_forgets_the_failures() -> None:
    async def body() -> None:
        clock = FakeClock()
        queue, recorder = queue_with(clock, max_retries=10), Recorder(failing={RUN})
        queue.add(RUN)
        for _ in range(3):
            await queue.process_one(recorder.process, recorder.give_up)
            clock.now += queue.promote_due() or 0
            queue.promote_due()
        assert queue.failures(RUN) == 3
        recorder.failing.clear()
        await queue.process_one(recorder.process, recorder.give_up)
        assert queue.failures(RUN) == 0
        assert queue.promote_due() is None, "nothing is scheduled after a success"

    run(body)


def test_after_the_budget_the_key_is_reported_once_and_no_longer_retried() -> None:
    async def body() -> None:
        clock = FakeClock()
        poison, healthy = ("team", "poison"), ("team", "healthy")
        queue, recorder = queue_with(clock, max_retries=3), Recorder(failing={poison})
        queue.add(poison)
        while len(queue) or queue.promote_due() is not None:
            if not len(queue):
                clock.now += queue.promote_due() or 0
                queue.promote_due()
                continue
            await queue.process_one(recorder.process, recorder.give_up)
            queue.add(healthy)  # other keys keep flowing meanwhile
            await queue.process_one(recorder.process, recorder.give_up)
        assert recorder.processed.count(poison) == 4, "the first pass and three retries"
        assert recorder.gave_up == [(poison, 4, "poison is poison")]
        assert recorder.processed.count(healthy) == 4

        # A later watch event gives it one more pass, which fails without a second report.
        queue.add(poison)
        await queue.process_one(recorder.process, recorder.give_up)
        assert recorder.processed.count(poison) == 5
        assert len(recorder.gave_up) == 1
        assert queue.promote_due() is None

        # Once it succeeds, a later failure starts a fresh budget (and may be reported again).
        recorder.failing.clear()
        queue.add(poison)
        await queue.process_one(recorder.process, recorder.give_up)
        assert queue.failures(poison) == 0

    run(body)


def test_add_at_waits_until_the_wall_clock_moment() -> None:
    async def body() -> None:
        clock = FakeClock()
        wall = datetime(2026, 1, 1, tzinfo=UTC)
        queue = WorkQueue("test", clock=clock, wall_clock=lambda: wall)
        queue.add_at(RUN, wall + timedelta(seconds=30))
        assert queue.promote_due() == pytest.approx(30.0)
        clock.now += 30
        queue.promote_due()
        assert len(queue) == 1
        queue.add_at(("team", "overdue"), wall - timedelta(seconds=5))
        assert len(queue) == 2, "a moment in the past is due now"

    run(body)


def test_a_busy_or_absent_api_server_is_retried_past_the_budget_no_sooner_than_its_retry_after() -> None:
    """Retries live in the queue (the client reports): a transient answer is never given up on, and the wait
    follows the server's Retry-After but stays below the cap, so an API server that is back is noticed soon."""
    async def body() -> None:
        clock = FakeClock()
        queue, gave_up, passes = queue_with(clock, max_retries=3), [], []

        async def busy(key: Key) -> None:
            passes.append(clock.now)
            raise ApiError(429, "too many requests", retry_after=7.0)

        async def give_up(key: Key, attempts: int, error: BaseException) -> None:
            gave_up.append(key)

        queue.add(RUN)
        for _ in range(16):
            await queue.process_one(busy, give_up)
            wait = queue.promote_due()
            assert wait is not None, "retried"
            assert 7.0 <= wait <= TRANSIENT_BACKOFF_CAP
            clock.now += wait
            queue.promote_due()
        assert gave_up == [] and len(passes) == 16
        assert passes[-1] - passes[-2] == TRANSIENT_BACKOFF_CAP, "the backoff grew to the cap, no further"

        # A refusal that is not transient (403) still has a budget.
        async def forbidden(key: Key) -> None:
            raise ApiError(403, "forbidden")

        queue.forget(RUN)
        for _ in range(4):
            await queue.process_one(forbidden, give_up)
            clock.now += queue.promote_due() or 0
            queue.promote_due()
        assert gave_up == [RUN]

    run(body)


def test_add_within_gives_a_burst_of_requests_one_pass_at_the_end_of_the_first_ones_window() -> None:
    async def body() -> None:
        clock = FakeClock()
        queue, recorder = queue_with(clock), Recorder()
        queue.add_within(RUN, 0.5)
        clock.now += 0.3
        queue.add_within(RUN, 0.5)
        assert queue.promote_due() == pytest.approx(0.2), "the window runs from the first request"
        assert len(queue) == 0
        clock.now += 0.2
        queue.promote_due()
        assert len(queue) == 1
        await queue.process_one(recorder.process, recorder.give_up)
        assert recorder.processed == [RUN]
        queue.add_within(RUN, 0.5)
        assert queue.promote_due() == pytest.approx(0.5), "after its pass a new request opens a new window"

    run(body)


def test_an_earlier_delayed_add_serves_a_batch_window_and_its_entry_gives_no_pass_more() -> None:
    """One delayed add per key, the earliest (client-go's delaying queue): a wake_at due inside a batch window gives
    the pass the batch waited for; the window's own entry then gives none, and a request after that pass opens a
    new window (two passes for the burst, as many as before)."""
    async def body() -> None:
        clock = FakeClock()
        queue, recorder = queue_with(clock), Recorder()
        queue.add_within(RUN, 0.5)
        queue.add_after(RUN, 0.1)
        clock.now += 0.1
        queue.promote_due()
        await queue.process_one(recorder.process, recorder.give_up)
        queue.add_within(RUN, 0.5)
        assert queue.promote_due() == pytest.approx(0.5)
        clock.now += 0.5
        queue.promote_due()
        await queue.process_one(recorder.process, recorder.give_up)
        assert recorder.processed == [RUN, RUN]
        assert queue.promote_due() is None, "nothing more pending"

    run(body)


def test_a_later_delayed_add_waits_for_the_earlier_one_and_a_dropped_key_gives_no_pass() -> None:
    """Each pass of a chain asked for a look at its step's deadline; the passes those gave came after the run had
    finished, for nothing. The earliest look serves the later ones (its pass asks for its own next), and a finished
    run's delayed add is dropped."""
    async def body() -> None:
        clock = FakeClock()
        queue, recorder = queue_with(clock), Recorder()
        queue.add_after(RUN, 60)
        queue.add_after(RUN, 70)
        queue.add_after(RUN, 30)
        assert queue.promote_due() == pytest.approx(30)
        clock.now += 30
        queue.promote_due()
        await queue.process_one(recorder.process, recorder.give_up)
        assert recorder.processed == [RUN]
        assert queue.promote_due() is None, "the later looks were served by the earliest"
        queue.add_after(RUN, 60)
        queue.drop_delayed(RUN)
        clock.now += 60
        queue.promote_due()
        assert len(queue) == 0

    run(body)


def test_the_delayed_heap_sheds_its_stale_entries() -> None:
    async def body() -> None:
        clock = FakeClock()
        queue = queue_with(clock)
        for index in range(5000):
            queue.add_after(("team", f"run-{index % 10}"), 5000 - index)  # each earlier than the key's last
        assert len(queue._delayed) <= 2 * 10 + STALE_ENTRIES_KEPT + 1
        clock.now += 5000
        queue.promote_due()
        assert len(queue) == 10

    run(body)
