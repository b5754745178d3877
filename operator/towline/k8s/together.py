"""Requests of one pass made side by side, a bounded number at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable


async def side_by_side(calls: Iterable[Awaitable[None]], limit: int) -> None:
    """Await every call, at most `limit` under way at once; every call runs to its end even when one fails, and the
    first failure is raised afterwards (the pass fails, and its retry finds what the others did)."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[None]) -> None:
        async with gate:
            await call

    outcomes = await asyncio.gather(*(one(call) for call in calls), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
