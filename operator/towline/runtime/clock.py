"""The time the operator schedules by: a wall clock, a monotonic clock, and word when it jumps.

The operator process uses `SYSTEM_CLOCK`. The clock is a parameter (of
`Operator` and of `run_operator`) so that a harness can start the operator
with another one; nothing in the shipped configuration (flags, environment,
chart values) chooses a clock, so a deployment always runs on the machine's.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall time, aware, UTC: what schedules and history ages are computed from."""

    def monotonic(self) -> float:
        """Seconds on a clock that only moves forward, for delays (moves with `now`)."""

    async def moved(self) -> None:
        """Return once the clock has jumped forward, so delayed work is looked at again."""


class SystemClock:
    """The machine's clocks. A jump of the system's wall clock is noticed at the next wake-up."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def moved(self) -> None:
        await asyncio.Event().wait()  # never: monotonic time does not jump


SYSTEM_CLOCK: Clock = SystemClock()
