"""Per-trigger rate limits: a token bucket per trigger, refilled continuously. Pure: time is an argument."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

MAX_BUCKETS = 10_000


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """`per_minute` deliveries a minute, in bursts of up to `per_minute`; least recently used buckets go first."""

    def __init__(self, max_buckets: int = MAX_BUCKETS) -> None:
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()
        self._max = max_buckets

    def take(self, key: tuple[str, ...], per_minute: int, now: float) -> float | None:
        """Take one token: None if allowed, else the seconds until one is available (Retry-After)."""
        rate = per_minute / 60.0
        bucket = self._buckets.pop(key, None) or _Bucket(tokens=float(per_minute), updated=now)
        bucket.tokens = min(float(per_minute), bucket.tokens + max(0.0, now - bucket.updated) * rate)
        bucket.updated = now
        self._buckets[key] = bucket
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / rate
