"""A rate-limited, de-duplicating work queue of object keys, like client-go's.

Watch events only say "look at this key again"; the reconcile reads the world
afresh. A key is processed by one worker at a time, and a key added while it
is being processed is processed once more afterwards. A failed pass is retried
with per-key exponential backoff (see `ratelimit`); a success forgets the
failures. After `max_retries` retries in a row the queue stops retrying the
key and reports it once through `on_give_up`; the next add (a watch event, a
requeue) gives it one more pass. The API client never retries: a transient
answer (throttled, unavailable, unreachable) is retried here, never given up
on, no sooner than the server's Retry-After and no later than
`TRANSIENT_BACKOFF_CAP` (an API server that is back is noticed soon). Delayed adds are hints kept in memory only:
every wake-up time the engine needs is also persisted in the run's status.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from towline.handlers.context import Key
from towline.k8s.client import ApiError
from towline.runtime import metrics
from towline.runtime.ratelimit import RateLimiter, default_controller_rate_limiter

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 15
"""5 ms doubling 15 times: about 5 minutes of retries before the run is marked."""
TRANSIENT_BACKOFF_CAP = 30.0
"""Seconds: the longest a key waits between passes that failed only because the API server was busy or away."""
STALE_ENTRIES_KEPT = 1024
"""Stale entries the delayed heap may hold (beyond twice the live ones) before it is rebuilt from the live ones."""

GiveUp = Callable[[Key, int, BaseException], Awaitable[None]]


class WorkQueue:
    def __init__(
        self,
        name: str,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        rate_limiter: RateLimiter | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.name = name
        self.max_retries = max_retries
        self._limiter = rate_limiter or default_controller_rate_limiter(clock)
        self._clock = clock
        self._wall_clock = wall_clock
        self._ready: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: dict[Key, float] = {}
        self._processing: set[Key] = set()
        self._dirty: set[Key] = set()
        self._exhausted: set[Key] = set()
        self._delayed: list[tuple[float, int, Key]] = []
        self._counter = itertools.count()
        self._delayed_changed = asyncio.Event()
        self._batching: set[Key] = set()
        """Keys `add_within` has a delayed add pending for (served by the key's one live entry, whenever due)."""
        self._waiting: dict[Key, tuple[float, int]] = {}
        """Each delayed key's one live entry in `_delayed` (when due, sequence number); the heap's other entries
        of the key are stale and skipped."""

    def __contains__(self, key: object) -> bool:
        """Whether a pass for `key` is waiting: queued, or due again after the one in progress."""
        return key in self._queued or key in self._dirty

    def add(self, key: Key) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued[key] = self._clock()
            self._ready.put_nowait(key)
            metrics.ADDS.labels(self.name).inc()
            metrics.DEPTH.labels(self.name).set(len(self._queued))

    def add_after(self, key: Key, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        self._push_delayed(key, delay)

    def _push_delayed(self, key: Key, delay: float) -> None:
        """Add `key` `delay` seconds from now, unless it is due earlier already (client-go's delaying queue: one
        delayed add per key, the earliest): the pass that comes then asks for its own next look (a `wake_at`, a
        retry). Each pass of a chain asked for a look at its step's deadline, and every one of those came, long
        after the run had finished, for a pass that read it to find nothing to do."""
        due = self._clock() + delay
        waiting = self._waiting.get(key)
        if waiting is not None and waiting[0] <= due:
            return
        sequence = next(self._counter)
        heapq.heappush(self._delayed, (due, sequence, key))
        self._waiting[key] = (due, sequence)
        if len(self._delayed) > 2 * len(self._waiting) + STALE_ENTRIES_KEPT:
            self._delayed = [(when, number, live) for live, (when, number) in self._waiting.items()]
            heapq.heapify(self._delayed)
        self._delayed_changed.set()

    def drop_delayed(self, key: Key) -> None:
        """Forget the key's delayed add (its run finished: no pass it asked for has anything left to do)."""
        self._waiting.pop(key, None)
        self._batching.discard(key)

    def add_within(self, key: Key, window: float) -> None:
        """Add `key` `window` seconds from the first such request, once however often it is asked meanwhile.

        For events that come in bursts and need one pass between them: the steps of a fan-out ending one by
        one share a pass instead of taking one each (each pass of a large run decides, dumps and writes all
        of its status).
        """
        if window <= 0:
            self.add(key)
            return
        if key in self._batching:
            return
        self._batching.add(key)
        self._push_delayed(key, window)

    def add_at(self, key: Key, when: datetime) -> None:
        """Look at `key` again at `when` (a hint; status holds the truth)."""
        self.add_after(key, (when - self._wall_clock()).total_seconds())

    def recheck(self) -> None:
        """Look at the delayed keys again now (the clock they wait on has jumped)."""
        self._delayed_changed.set()

    def add_rate_limited(self, key: Key) -> None:
        metrics.RETRIES.labels(self.name).inc()
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: Key) -> None:
        self._limiter.forget(key)
        self._exhausted.discard(key)

    def failures(self, key: Key) -> int:
        return self._limiter.failures(key)

    def __len__(self) -> int:
        return len(self._queued)

    def promote_due(self) -> float | None:
        """Move due delayed keys to the ready queue; seconds until the next one is due, if any."""
        now = self._clock()
        while self._delayed:
            due, sequence, key = self._delayed[0]
            waiting = self._waiting.get(key)
            if waiting is None or waiting[1] != sequence:
                heapq.heappop(self._delayed)  # stale: an earlier entry of the key took its place, or it was dropped
                continue
            if due > now:
                break
            heapq.heappop(self._delayed)
            del self._waiting[key]
            self._batching.discard(key)  # the one live entry serves every delayed add of the key, a batch's too
            self.add(key)
        return (self._delayed[0][0] - now) if self._delayed else None

    async def run_delayed(self) -> None:
        """Promote delayed keys when they are due; runs for the life of the operator."""
        while True:
            self._delayed_changed.clear()
            timeout = self.promote_due()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._delayed_changed.wait(), timeout=3600.0 if timeout is None else timeout)

    async def get(self) -> Key:
        key = await self._ready.get()
        queued_at = self._queued.pop(key)
        metrics.DEPTH.labels(self.name).set(len(self._queued))
        metrics.QUEUE_DURATION.labels(self.name).observe(max(0.0, self._clock() - queued_at))
        self._processing.add(key)
        return key

    def done(self, key: Key) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    async def process_one(self, process: Callable[[Key], Awaitable[None]], on_give_up: GiveUp) -> Key:
        """Take one key, process it, and retry, forget or give up on it by the outcome."""
        key = await self.get()
        started = self._clock()
        try:
            await process(key)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # any failure of a pass is retried, then reported
            await self._failed(key, error, on_give_up)
        else:
            self.forget(key)
        finally:
            metrics.WORK_DURATION.labels(self.name).observe(max(0.0, self._clock() - started))
            self.done(key)
        return key

    async def run_worker(self, process: Callable[[Key], Awaitable[None]], on_give_up: GiveUp) -> None:
        while True:
            await self.process_one(process, on_give_up)

    async def _failed(self, key: Key, error: Exception, on_give_up: GiveUp) -> None:
        retries = self._limiter.failures(key)
        if isinstance(error, ApiError) and error.transient:
            log.info("%s %s/%s: the API server answered %d (%s); retry %d with backoff",
                     self.name, *key, error.status, error.message[:200], retries + 1)
            metrics.RETRIES.labels(self.name).inc()
            delay = min(self._limiter.when(key), TRANSIENT_BACKOFF_CAP)
            self.add_after(key, max(delay, error.retry_after or 0.0))
            return
        if retries < self.max_retries:
            log.warning("%s %s/%s: pass failed (%s: %s); retry %d of %d with backoff",
                        self.name, *key, type(error).__name__, error, retries + 1, self.max_retries,
                        exc_info=retries == 0)
            self.add_rate_limited(key)
            return
        if key in self._exhausted:
            log.info("%s %s/%s: failed again after its retries ran out (%s)", self.name, *key, error)
            return
        self._exhausted.add(key)
        metrics.GAVE_UP.labels(self.name).inc()
        log.error("%s %s/%s: %d passes failed; giving up until it changes", self.name, *key, retries + 1)
        try:
            await on_give_up(key, retries + 1, error)
        except Exception:
            log.exception("%s %s/%s: could not report the failure", self.name, *key)
