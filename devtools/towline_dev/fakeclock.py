"""A clock a test moves for the operator, so schedule tests never wait for real minute boundaries.

`towline_dev.testoperator --clock-file FILE` hands the operator a `FileClock`:
the machine's time plus an offset in seconds that the test writes to FILE
(`MovableClock`). Only that dev launcher can give the operator another clock:
the shipped `towline operator` has no flag, variable or value for it.

The offset only grows, so the operator sees time jump forward as a machine
whose clock is stepped does; each jump wakes its delayed Workflow passes.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

POLL_SECONDS = 0.05


class FileClock:
    """Operator side: real time plus the offset last read from the file (read at start and polled)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = self._read()

    def _read(self) -> float:
        try:
            return float(self._path.read_text().strip() or 0)
        except FileNotFoundError:
            return 0.0

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self._offset)

    def monotonic(self) -> float:
        return time.monotonic() + self._offset

    async def moved(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            offset = self._read()
            if offset != self._offset:
                self._offset = offset
                return


class MovableClock:
    """Test side: moves the clock of an operator started with `OperatorProcess(clock_file=...)`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            self._write(0.0)

    @property
    def offset(self) -> float:
        return float(self.path.read_text().strip() or 0)

    def now(self) -> datetime:
        """The operator's time now (it reads the file within `POLL_SECONDS`)."""
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    def advance_to(self, when: datetime) -> None:
        """Set the operator's time to `when` (it then runs on from there); never backwards."""
        offset = (when - datetime.now(UTC)).total_seconds()
        if offset < self.offset:
            raise ValueError(f"the operator's clock only moves forward: {when} is before {self.now()}")
        self._write(offset)

    def advance_past(self, moment: datetime, by: timedelta = timedelta(seconds=1)) -> None:
        """Move the operator's time to `by` after `moment`, unless it is later already."""
        if self.now() < moment + by:
            self.advance_to(moment + by)

    def _write(self, offset: float) -> None:
        staging = self.path.with_suffix(".new")
        staging.write_text(f"{offset:.6f}\n")
        staging.replace(self.path)  # atomic: the operator never reads half a number
