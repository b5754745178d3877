"""Concurrency within one pass: its requests made side by side, a bounded number at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def side_by_side(calls: Iterable[Awaitable[T]], limit: int | None = None) -> list[T]:
    """Await every call, at most `limit` under way at once (None: all), and return their results in order; every
    call runs to its end even when one fails, and the first failure is raised afterwards (the pass fails, and its
    retry finds what the others did)."""
    gate = asyncio.Semaphore(limit) if limit is not None else None

    async def one(call: Awaitable[T]) -> T:
        if gate is None:
            return await call
        async with gate:
            return await call

    outcomes = await asyncio.gather(*(one(call) for call in calls), return_exceptions=True)
    results: list[T] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)
    return results
