"""Namespaces hashed into shards, one Lease per shard: several operator replicas act at once.

Tekton's scheme (knative's leader-election buckets) cut to what Towline needs:
a namespace belongs to shard `sha256(namespace) mod S`, every shard has its own
Lease, and a replica acts on a namespace only while it holds that namespace's
shard Lease, renewed within the renew deadline (`LeaderElector`'s fence, per
shard). Every replica watches everything, so taking a shard over needs no new
watch: the new holder queues that shard's keys again.

With one shard there is one Lease under the operator's own name, and this is
exactly the single leader of old.

Spreading shards over replicas: a replica takes a free shard at once only while
it holds fewer than its fair share, ceil(S / replicas) (the chart passes its
replica count); above that it waits two retry periods first, so a replica
below its share gets the shard when one is alive, and a shard whose holder died
is still taken over when none is. A replica below its share asks a replica
above it for one shard (an annotation on that shard's Lease); the holder stops
renewing it and lets it expire, the path that is already sound for a killed
holder (the renew deadline ends every write before another can take over).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from towline.k8s.client import LEASES, ApiError, KubeApi
from towline.k8s.leader import LeaderElector, LeaderTimings, format_time, parse_time

log = logging.getLogger(__name__)

MAX_SHARDS = 64
WANTED_BY = "towline.dev/shard-wanted-by"
"""On a shard's Lease: `<identity> <time>`, a replica below its fair share asking the holder to let go."""


def shard_of(namespace: str, shards: int) -> int:
    """The namespace's shard: stable across processes and versions (never Python's salted hash())."""
    if shards <= 1:
        return 0
    digest = hashlib.sha256(namespace.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def shard_lease_name(base: str, index: int, shards: int) -> str:
    """One shard keeps the base name (the single Lease of old, so upgrades keep their leader)."""
    return base if shards <= 1 else f"{base}-shard-{index}-of-{shards}"


def fair_share(shards: int, replicas: int) -> int:
    return math.ceil(shards / max(1, replicas))


class ShardElectors:
    """One `LeaderElector` per shard, and the rules that spread the shards over the replicas."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        base_name: str,
        identity: str,
        shards: int = 1,
        replicas: int = 1,
        timings: LeaderTimings | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"shards must be between 1 and {MAX_SHARDS}, not {shards}")
        self._api = api
        self._namespace = namespace
        self.identity = identity
        self.count = shards
        self.share = fair_share(shards, replicas)
        self.timings = timings = timings or LeaderTimings()
        self._clock = clock
        self._holders: dict[int, str | None] = {}
        """Each shard's holder as last read, when its Lease was current (None: free or expired)."""
        self._takeable_since: dict[int, datetime] = {}
        self._let_go_at: dict[int, datetime] = {}
        hooks = shards > 1
        self.electors = [
            LeaderElector(
                api, namespace=namespace, name=shard_lease_name(base_name, index, shards), identity=identity,
                timings=timings, clock=clock,
                observed=partial(self._observed, index) if hooks else None,
                may_take=partial(self._may_take, index) if hooks else None,
                should_let_go=partial(self._should_let_go, index) if hooks else None,
            )
            for index in range(shards)
        ]

    def shard_of(self, namespace: str) -> int:
        return shard_of(namespace, self.count)

    def holds(self, namespace: str) -> bool:
        """Whether this replica may act on `namespace` now (its shard's Lease renewed within the deadline)."""
        return self.electors[self.shard_of(namespace)].is_leader

    def seconds_left(self, namespace: str) -> float:
        return self.electors[self.shard_of(namespace)].seconds_left()

    def held(self) -> list[int]:
        return [index for index, elector in enumerate(self.electors) if elector.is_leader]

    @property
    def any_held(self) -> bool:
        return any(elector.is_leader for elector in self.electors)

    def may_write(self, path: str) -> bool:
        """The fence of a pass's writes: the namespace the write lands in must be in a shard held now
        (a cluster-scoped write counts as namespace "", as a ClusterStepType's key does)."""
        if self.count == 1:
            return self.electors[0].is_leader
        return self.holds(namespace_of_path(path))

    async def run(self) -> None:
        """Every retry period, one attempt per shard, then perhaps one request for a shard.

        The shards held are renewed at once (their deadlines run); the others are tried one after
        the other, so each try counts the shard taken just before it against this replica's share.
        """
        while True:
            held = [elector for elector in self.electors if elector.is_leader]
            await self._attempt(held)
            for elector in self.electors:
                if elector not in held:
                    await self._attempt([elector])
            if self.count > 1:
                try:
                    await self._ask_for_a_shard()
                except ApiError as error:
                    log.info("shards: could not ask for a shard (%s)", error)
            await asyncio.sleep(self.timings.retry_period)

    @staticmethod
    async def _attempt(electors: list[LeaderElector]) -> None:
        results = await asyncio.gather(*(elector.try_once() for elector in electors), return_exceptions=True)
        for elector, result in zip(electors, results, strict=True):
            if isinstance(result, BaseException):
                log.error("leader election: the attempt failed", exc_info=result)
                if elector.became_leader.is_set() and not elector.is_leader:
                    elector.step_down()

    async def release(self) -> None:
        await asyncio.gather(*(elector.release() for elector in self.electors))

    # The spreading rules, called by each shard's elector with the Lease it read.
    def _observed(self, index: int, lease: dict[str, Any] | None) -> None:
        now = self._clock()
        spec = (lease or {}).get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or self.timings.lease_seconds)
        current = bool(holder) and renewed is not None and now - renewed <= timedelta(seconds=duration)
        self._holders[index] = holder if current else None
        if current:
            self._takeable_since.pop(index, None)
            if holder != self.identity:
                self._let_go_at.pop(index, None)  # somebody else took it: this replica may take it again later
        else:
            self._takeable_since.setdefault(index, now)

    def _may_take(self, index: int) -> bool:
        now = self._clock()
        let_go = self._let_go_at.get(index)
        if let_go is not None and now - let_go < timedelta(seconds=2 * self.timings.lease_seconds):
            return False  # let go on request: the asker takes it
        if len(self.held()) < self.share:
            return True
        since = self._takeable_since.get(index)
        return since is not None and now - since >= timedelta(seconds=2 * self.timings.retry_period)

    def _should_let_go(self, index: int, lease: dict[str, Any]) -> bool:
        """Renewing a shard: stop when a replica below its share asked for it and this one is above."""
        wanted = ((lease.get("metadata") or {}).get("annotations") or {}).get(WANTED_BY, "")
        asker, _, at = wanted.partition(" ")
        moment = parse_time(at) if at else None
        if not asker or asker == self.identity or moment is None:
            return False
        if self._clock() - moment > timedelta(seconds=self.timings.lease_seconds):
            return False  # an old request, perhaps from a replica gone since
        if len(self.held()) <= self.share:
            return False
        self._let_go_at[index] = self._clock()
        log.info("shards: letting shard %d go, asked for by %s", index, asker)
        return True

    async def _ask_for_a_shard(self) -> None:
        if len(self.held()) >= self.share or not self._holders:
            return
        counts: dict[str, list[int]] = {}
        for index, holder in self._holders.items():
            if holder is not None:
                counts.setdefault(holder, []).append(index)
        over = sorted(((len(held), holder) for holder, held in counts.items()
                       if holder != self.identity and len(held) > self.share), reverse=True)
        if not over:
            return
        index = max(counts[over[0][1]])
        path = f"{LEASES.path(self._namespace)}/{self.electors[index].name}"
        lease = await self._api.get(path)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != over[0][1]:
            return
        annotations = lease["metadata"].setdefault("annotations", {})
        asked = annotations.get(WANTED_BY, "")
        if asked.startswith(f"{self.identity} "):
            moment = parse_time(asked.partition(" ")[2])
            if moment is not None and self._clock() - moment < timedelta(seconds=self.timings.lease_seconds / 2):
                return
        annotations[WANTED_BY] = f"{self.identity} {format_time(self._clock())}"
        await self._api.replace(path, lease)  # a 409 (a renewal came first) is tried again next period
        log.info("shards: asked %s for shard %d", over[0][1], index)


def namespace_of_path(path: str) -> str:
    """`/api(s)/.../namespaces/<ns>/...` -> ns; "" for a cluster-scoped path."""
    parts = path.split("/")
    for position, part in enumerate(parts[:-1]):
        if part == "namespaces" and position + 2 < len(parts):
            return parts[position + 1]
    return ""
