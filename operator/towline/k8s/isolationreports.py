"""Namespace-wide reports of steps whose pods never became isolated (egress.requireIsolation).

Each such attempt makes the engine ask for an `EgressIsolationMissing` Event; posting
one per attempt would be a storm on a cluster without a NetworkPolicy enforcer. So
a namespace gets one Event once `threshold` attempts failed this way within
`window_seconds`, and then at most one per window while they keep failing. The
counts live in the operator's memory: a restarted operator starts counting anew.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

THRESHOLD = 3
WINDOW_SECONDS = 600.0


@dataclass
class IsolationFailureReports:
    threshold: int = THRESHOLD
    window_seconds: float = WINDOW_SECONDS
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    _reported: dict[str, float] = field(default_factory=dict)

    def record(self, namespace: str) -> str | None:
        """Count one failed attempt in `namespace`; the Event message when one is due now, else None."""
        now = self.clock()
        recent = self._failures.setdefault(namespace, deque())
        recent.append(now)
        while recent and now - recent[0] > self.window_seconds:
            recent.popleft()
        last = self._reported.get(namespace)
        if len(recent) < self.threshold or (last is not None and now - last < self.window_seconds):
            return None
        self._reported[namespace] = now
        minutes = self.window_seconds / 60
        return (
            f"{len(recent)} step attempts in namespace {namespace} failed in the last {minutes:.0f} minutes because "
            "their pod's egress isolation was not in effect: the cluster's NetworkPolicy enforcer is missing or "
            "slow. Fix the enforcer; only on a cluster that knowingly enforces no NetworkPolicies set the chart "
            "value egress.requireIsolation to false (unsafe: steps then call out unprotected)"
        )
