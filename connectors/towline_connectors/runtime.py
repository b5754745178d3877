"""Small runtime helpers every action shares: the deadline (the step kit's), side-effect tracking, threads.

Nothing here knows about actions or credentials; it must never do I/O itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

from towline_step.attempt import Deadline

__all__ = ["Deadline", "SideEffectTracker", "run_blocking"]

T = TypeVar("T")


class SideEffectTracker:
    """Counts writes of request bytes, so a failure can tell "never sent" from "maybe done".

    The distinction decides between a safe retry (`transient`) and
    `unknown_side_effect` for mutating actions.
    """

    def __init__(self) -> None:
        self._writes = 0
        self._lock = threading.Lock()

    def mark_sent(self) -> None:
        with self._lock:
            self._writes += 1

    def snapshot(self) -> int:
        return self._writes

    def sent_since(self, snapshot: int) -> bool:
        return self._writes > snapshot

    @property
    def sent(self) -> bool:
        return self._writes > 0


async def run_blocking(fn: Callable[..., T], *args: object) -> T:
    """Run a blocking call in a daemon thread and await its result.

    Unlike `asyncio.to_thread`, a call stuck past the deadline (a hung DNS
    lookup, a silent SMTP server) can be abandoned: the runner exits without
    waiting for an executor to drain.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():  # cancelled by the deadline: nobody wants the answer
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = fn(*args)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is already closed: nobody is waiting
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name=f"towline-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    return await future
