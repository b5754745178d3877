"""What the archive's streams have shown and what waits for its writer (towline.archive.service), and how the writer
does the work that waits on the API server side by side."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from towline.jsontypes import JSON
from towline.k8s.indexer import Index, ObjectKey, Store, by_label
from towline.k8s.labels import LABEL_RUN

Key = ObjectKey
"""(namespace, name)"""

APPROVALS_BY_RUN: Index[Key, JSON, Key] = Index(
    "run", lambda key, body: (key[0], str((body.get("spec") or {}).get("runName") or "")))
"""An Approval by (namespace, the run it belongs to): the run its spec names."""
PODS_BY_RUN: Index[Key, JSON, Key] = by_label("run", LABEL_RUN)
"""A step pod by (namespace, its run label)."""

AT_ONCE = 8
"""Log reads, and Job TTL patches, in flight at once: each waits on the API server, not on the record, so ended
pods are read side by side while their records are still appended one at a time, in order."""


@dataclass
class ArchiveState:
    """What the streams have shown: runs by key, their approvals and step pods, and what waits to be written."""

    runs: Store[Key, JSON] = field(default_factory=Store)
    approvals: Store[Key, JSON] = field(default_factory=lambda: Store(APPROVALS_BY_RUN))
    """By (namespace, name), and by the run they belong to."""
    pods: Store[Key, JSON] = field(default_factory=lambda: Store(PODS_BY_RUN))
    """By (namespace, name), and by the run they belong to."""
    pending: dict[tuple[str, str, str], None] = field(default_factory=dict)
    """(what, namespace, name) in arrival order: `run`, `approval` or `pod` work for the writer."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    timed_pods: set[str] = field(default_factory=set)
    """UIDs of step pods whose Job this process has given its TTL: one PATCH per Job (forgotten with the pod)."""
    logged: dict[str, list[JSON]] = field(default_factory=dict)
    """Step pod UID -> the references of its log records, once this process has them in the record (forgotten
    with the pod): a run's record takes them from here, not from the database again."""
    unsynced: set[str] = field(default_factory=set)
    """Streams whose first list has not ended yet: until none is left, no run is written (its pods and approvals
    may not have been listed yet, and a run released without them would lose their logs)."""

    def want(self, what: str, namespace: str, name: str) -> None:
        self.pending[(what, namespace, name)] = None
        self.wake.set()


T = TypeVar("T")


async def side_by_side(calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """The calls' results in order, at most AT_ONCE of them in flight."""
    limit = asyncio.Semaphore(AT_ONCE)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with limit:
            return await call()

    return list(await asyncio.gather(*(one(call) for call in calls)))


def uid_of(body: JSON) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


def namespace_of(body: JSON) -> str:
    return str((body.get("metadata") or {}).get("namespace") or "")


def name_of(body: JSON) -> str:
    return str((body.get("metadata") or {}).get("name") or "")
