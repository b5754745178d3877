"""The ingress's capacity, shared out: delivery slots and buffered body bytes, in total and per namespace.

Anyone may send to a webhook path, so no one sender (or one namespace's
trigger paths) may take all of it: a namespace gets at most its share of the
slots and of the bytes being buffered, the process at most the totals (which
keep it well inside its memory limit). A delivery that finds no room answers
503 Busy at once, before its body is read, instead of queueing. Pure and
synchronous: one event loop owns it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class CapacityLimits:
    max_in_flight: int = 64
    """Deliveries handled at once, across all namespaces; more answer 503 with Retry-After instead of queueing."""
    namespace_in_flight: int = 16
    """Deliveries to one namespace's triggers handled at once: one namespace's flood leaves the rest to the others."""
    max_buffered_bytes: int = 64 * 1024 * 1024
    """Body bytes held in memory at once, across all deliveries."""
    namespace_buffered_bytes: int = 16 * 1024 * 1024
    """Body bytes held at once for one namespace's deliveries."""

    def __post_init__(self) -> None:
        for name in ("max_in_flight", "namespace_in_flight", "max_buffered_bytes", "namespace_buffered_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


class Capacity:
    """Counts what every delivery in progress holds; `lease` takes a slot, `Lease.grow` takes bytes."""

    def __init__(self, limits: CapacityLimits) -> None:
        self.limits = limits
        self._slots: Counter[str] = Counter()
        self._bytes: Counter[str] = Counter()
        self._total_slots = 0
        self._total_bytes = 0

    @property
    def buffered_bytes(self) -> int:
        return self._total_bytes

    def lease(self, namespace: str) -> Lease | None:
        """A slot for one delivery to `namespace`, or None if the process or the namespace is full."""
        if self._total_slots >= self.limits.max_in_flight or self._slots[namespace] >= self.limits.namespace_in_flight:
            return None
        self._total_slots += 1
        self._slots[namespace] += 1
        return Lease(self, namespace)

    def _grow(self, namespace: str, size: int) -> bool:
        if (self._total_bytes + size > self.limits.max_buffered_bytes
                or self._bytes[namespace] + size > self.limits.namespace_buffered_bytes):
            return False
        self._total_bytes += size
        self._bytes[namespace] += size
        return True

    def _release(self, namespace: str, size: int) -> None:
        self._total_slots -= 1
        self._slots[namespace] -= 1
        self._total_bytes -= size
        self._bytes[namespace] -= size
        if not self._slots[namespace]:
            del self._slots[namespace]
            del self._bytes[namespace]


class Lease:
    """One delivery's slot and the body bytes it holds; `release` gives both back (once)."""

    def __init__(self, capacity: Capacity, namespace: str) -> None:
        self._capacity = capacity
        self._namespace = namespace
        self.held = 0
        self._released = False

    def grow(self, size: int) -> bool:
        """Take `size` more bytes; False (taking nothing) if that would exceed a budget."""
        if not self._capacity._grow(self._namespace, size):
            return False
        self.held += size
        return True

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._capacity._release(self._namespace, self.held)
