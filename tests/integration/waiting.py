"""The one way an integration test waits for a fact: `wait_for` (re-exported by `tests.integration.support`).

Its own module so that the support modules `support` imports (the binding wait) can wait the same way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["wait_for"]


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 90.0, interval: float = 0.3, *,
             explain: Callable[[], object] | None = None) -> Any:
    """Poll until `probe` returns something truthy, and return that; the one way an integration test waits.

    On timeout, fail with `what` and the last value seen, or what `explain` returns then (the state that kept
    the fact false, when the probe's own falsy answer says nothing).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    seen = explain() if explain is not None else last
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {seen!r}")
