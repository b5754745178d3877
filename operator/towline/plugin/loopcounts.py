"""A loop's instances counted by state, for the display model (towline.plugin.runtree). Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class LoopCounts:
    """Where a loop's instances stand: how many there are and how many are in each state."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0
    running: int = 0
    """Running, retrying, or paused for credential repair."""
    pending: int = 0
    skipped: int = 0
    cancelled: int = 0

    @property
    def text(self) -> str:
        """`20 instances: 5 succeeded, 3 running, 12 pending` (states with none left out)."""
        states = [(self.succeeded, "succeeded"), (self.failed, "failed"), (self.running, "running"),
                  (self.pending, "pending"), (self.skipped, "skipped"), (self.cancelled, "cancelled")]
        counted = ", ".join(f"{count} {state}" for count, state in states if count)
        return f"{self.total} instance{'s' if self.total != 1 else ''}" + (f": {counted}" if counted else "")


_COUNTED = {"Succeeded": "succeeded", "Failed": "failed", "Running": "running", "Retrying": "running",
            "Skipped": "skipped", "Cancelled": "cancelled"}


def loop_counts(total: int, phases: Iterable[str | None]) -> LoopCounts:
    """The counts of a loop of `total` items whose listed instances are in `phases` (the rest are pending)."""
    counts = dict.fromkeys(("succeeded", "failed", "running", "skipped", "cancelled"), 0)
    listed = 0
    for phase in phases:
        state = _COUNTED.get(phase or "")
        if state is None:
            continue
        counts[state] += 1
        listed += 1
    return LoopCounts(total=max(total, listed), pending=max(total - listed, 0), **counts)
