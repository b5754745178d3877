"""A rate-limited, de-duplicating work queue of object keys, like client-go's.

Watch events only say "look at this run again"; the reconcile reads the world
afresh. A key is processed by one worker at a time, a key added while it is
being processed is processed once more afterwards, and `add_after` keeps
requeues in memory only as a hint: every wake-up time the engine needs is also
persisted in the run's status and recomputed on restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

Key = tuple[str, str]
"""(namespace, name)"""

log = logging.getLogger(__name__)


class WorkQueue:
    def __init__(self) -> None:
        self._ready: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._processing: set[Key] = set()
        self._dirty: set[Key] = set()
        self._delayed: list[tuple[float, int, Key]] = []
        self._counter = itertools.count()
        self._delayed_changed = asyncio.Event()

    def add(self, key: Key) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._ready.put_nowait(key)

    def add_at(self, key: Key, when: datetime) -> None:
        """Look at `key` again at `when` (a hint; status holds the truth)."""
        delay = (when - datetime.now(UTC)).total_seconds()
        loop = asyncio.get_running_loop()
        heapq.heappush(self._delayed, (loop.time() + max(0.0, delay), next(self._counter), key))
        self._delayed_changed.set()

    def __len__(self) -> int:
        return len(self._queued)

    async def run_delayed(self) -> None:
        """Move due delayed keys to the ready queue; runs for the life of the operator."""
        loop = asyncio.get_running_loop()
        while True:
            self._delayed_changed.clear()
            now = loop.time()
            while self._delayed and self._delayed[0][0] <= now:
                _, _, key = heapq.heappop(self._delayed)
                self.add(key)
            timeout = (self._delayed[0][0] - now) if self._delayed else 3600.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._delayed_changed.wait(), timeout=timeout)

    async def run_worker(self, process: Callable[[Key], Awaitable[None]]) -> None:
        """Process keys forever; a failure requeues the key with a short delay."""
        while True:
            key = await self._ready.get()
            self._queued.discard(key)
            self._processing.add(key)
            try:
                await process(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reconcile of %s/%s failed; retrying shortly", *key)
                loop = asyncio.get_running_loop()
                heapq.heappush(self._delayed, (loop.time() + 2.0, next(self._counter), key))
                self._delayed_changed.set()
            finally:
                self._processing.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
