"""The operator's movable clock: a test writes an offset, the operator's clock follows and says it moved."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from towline_dev.fakeclock import FileClock, MovableClock


def test_the_operator_clock_follows_the_test_and_reports_the_jump(tmp_path: Path) -> None:
    movable = MovableClock(tmp_path / "clock")
    operator = FileClock(movable.path)
    assert abs((operator.now() - datetime.now(UTC)).total_seconds()) < 5, "unmoved: the machine's time"
    slot = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=10)
    before = operator.monotonic()

    async def body() -> None:
        moved = asyncio.ensure_future(operator.moved())
        await asyncio.sleep(0.2)
        assert not moved.done(), "no jump yet"
        movable.advance_past(slot)
        await asyncio.wait_for(moved, timeout=5)

    asyncio.run(body())
    assert slot < operator.now() < slot + timedelta(seconds=5)
    assert operator.monotonic() - before > 500, "delays are measured on the moved clock too"
    assert FileClock(movable.path).now() >= slot, "a restarted operator starts from the moved time"


def test_the_clock_never_goes_back_and_advance_past_keeps_a_later_time(tmp_path: Path) -> None:
    movable = MovableClock(tmp_path / "clock")
    later = datetime.now(UTC) + timedelta(hours=1)
    movable.advance_to(later)
    movable.advance_past(later - timedelta(minutes=30))
    assert movable.now() >= later, "already past: unchanged"
    with pytest.raises(ValueError, match="only moves forward"):
        movable.advance_to(later - timedelta(minutes=30))
