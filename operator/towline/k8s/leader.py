"""Lease-based leader election (coordination.k8s.io/v1), as client-go does it.

Two replicas must never both act. kopf's peering only pauses lower-priority
peers and needs cluster-wide CRDs of its own; a Lease is the Kubernetes
standard, is namespaced, and the API server's optimistic concurrency on its
resourceVersion decides every race. A replica acts only while it holds a
Lease that it renewed less than `lease_seconds` ago, and it gives up acting
before the Lease could expire for others (`renew_deadline < lease_seconds`).
A replica that stops gracefully gives the Lease up (`release`, client-go's
ReleaseOnCancel) so another takes over at once instead of after the Lease
expires; a killed one cannot, and the Lease then expires as usual.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from towline.k8s.client import LEASES, ApiError, Conflict, KubeApi
from towline_connectors.wire import parse_rfc3339, rfc3339

log = logging.getLogger(__name__)


def format_time(moment: datetime) -> str:
    """A Lease's times are MicroTime."""
    return rfc3339(moment, timespec="microseconds")


def parse_time(text: str | None) -> datetime | None:
    return parse_rfc3339(text) if text else None


@dataclass(frozen=True)
class LeaderTimings:
    """client-go's defaults: a 15 s Lease, renewed within 10 s, tried every 2 s."""

    lease_seconds: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """Why these timings would let two replicas act at once, or flap; empty when they are sound."""
        found = []
        if not 0 < self.retry_period < self.renew_deadline:
            found.append(f"the retry period ({self.retry_period} s) must be above 0 and below the renew deadline "
                         f"({self.renew_deadline} s), or the Lease is never renewed in time")
        if not self.renew_deadline < self.lease_seconds:
            found.append(f"the renew deadline ({self.renew_deadline} s) must be below the Lease duration "
                         f"({self.lease_seconds} s), or a paused leader may act after another took over")
        return found


class LeaderElector:
    """Acquires and renews one Lease; `is_leader` is what workers check before acting."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        timings: LeaderTimings = LeaderTimings(),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        observed: Callable[[dict[str, Any] | None], None] | None = None,
        may_take: Callable[[], bool] | None = None,
        should_let_go: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """`observed`, `may_take` and `should_let_go` are for several Leases shared out among replicas
        (towline.k8s.shards): each Lease read is shown to `observed`; while not leading, the Lease is taken
        (or taken back) only if `may_take()`; while leading, it is not renewed once `should_let_go(lease)`."""
        problems = timings.problems()
        if problems:
            raise ValueError("leader election: " + "; ".join(problems))
        self._api = api
        self._namespace = namespace
        self.name = self._name = name
        self.identity = identity
        self.timings = timings
        self._clock = clock
        self._renewed_at: datetime | None = None
        self._observed = observed
        self._may_take = may_take
        self._should_let_go = should_let_go
        self.became_leader = asyncio.Event()
        self.lost_leadership = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        if self._renewed_at is None:
            return False
        return self._clock() - self._renewed_at < timedelta(seconds=self.timings.renew_deadline)

    def seconds_left(self) -> float:
        """How long this replica may still act without another renewal (0 when it may not)."""
        if self._renewed_at is None:
            return 0.0
        left = timedelta(seconds=self.timings.renew_deadline) - (self._clock() - self._renewed_at)
        return max(0.0, left.total_seconds())

    async def run(self) -> None:
        """Try every retry period, for as long as the process lives: an attempt that fails in a
        way nobody foresaw is logged, never the end of the loop (a dead elector never leads again)."""
        while True:
            try:
                await self.try_once()
            except Exception:
                log.exception("leader election: the attempt failed")
                if self.became_leader.is_set() and not self.is_leader:
                    self.step_down()
            await asyncio.sleep(self.timings.retry_period)

    async def try_once(self) -> bool:
        """One acquire-or-renew attempt; True while this replica leads afterwards."""
        if self.became_leader.is_set() and not self.is_leader:
            self.step_down()  # the deadline passed (a pause, a slow API server): act no more
        was_leader = self.is_leader
        # The deadline counts from when the renewal was sent, not from when the answer came:
        # a slow answer must not stretch this replica's claim past what the Lease says.
        sent_at = self._clock()
        try:
            renewed = await self._try_acquire_or_renew(sent_at)
        except ApiError as error:
            # Unknown whether the Lease is still ours: lead on until the deadline, no longer.
            log.warning("leader election: %s", error)
            if self.became_leader.is_set() and not self.is_leader:
                self.step_down()
            return self.is_leader
        if renewed:
            if was_leader and not self.is_leader:
                # The deadline passed while the renewal was on its way (a starved or paused process): this replica
                # stopped acting meanwhile (passes were cancelled, writes refused), so it lost the Lease and takes
                # it anew, and whatever waits for a new leader (queueing every key again) runs.
                self.step_down()
                was_leader = False
            self._renewed_at = sent_at
            if not was_leader:
                log.info("acquired leadership as %s", self.identity)
                self.lost_leadership.clear()
                self.became_leader.set()
        elif self.became_leader.is_set():
            self.step_down()  # somebody else holds it now
        return self.is_leader

    def step_down(self) -> None:
        log.warning("lost leadership as %s; stopping all actions", self.identity)
        self._renewed_at = None
        self.became_leader.clear()
        self.lost_leadership.set()

    async def release(self) -> bool:
        """Give the Lease up, if this replica still holds it; call only once nothing of its work still runs.

        As client-go's ReleaseOnCancel: no holder and a 1 s duration, so any other
        replica takes it on its next try. Never touches a Lease another replica holds.
        """
        self._renewed_at = None  # from here on this replica acts no more, whatever the answer
        self.became_leader.clear()
        self.lost_leadership.set()
        path = f"{LEASES.path(self._namespace)}/{self._name}"
        try:
            current = await self._api.get(path)
            if current is None or current.get("spec", {}).get("holderIdentity") != self.identity:
                return False
            now = format_time(self._clock())
            current["spec"] = {**current["spec"], "holderIdentity": None, "leaseDurationSeconds": 1,
                               "renewTime": now, "acquireTime": now}
            await self._api.replace(path, current)
        except ApiError as error:
            log.warning("leader election: could not release the Lease (%s); it expires on its own", error)
            return False
        log.info("released the Lease as %s", self.identity)
        return True

    async def _try_acquire_or_renew(self, now: datetime) -> bool:
        try:
            return await self._try_acquire_or_renew_once(now)
        except Conflict:
            # Somebody wrote the Lease since it was read: a replica asking for it (towline.k8s.shards) or one
            # taking it over. Read it again at once rather than stepping down for a write that may not be a claim.
            return await self._try_acquire_or_renew_once(now)

    async def _try_acquire_or_renew_once(self, now: datetime) -> bool:
        path = LEASES.path(self._namespace)
        current = await self._api.get(f"{path}/{self._name}")
        if self._observed is not None:
            self._observed(current)
        leading = self.is_leader
        if not leading and self._may_take is not None and not self._may_take():
            return False
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.timings.lease_seconds)),
            "renewTime": format_time(now),
        }
        if current is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": {**spec, "acquireTime": format_time(now), "leaseTransitions": 0},
            }
            _, created = await self._api.create(path, body)
            return created
        held = current.get("spec", {})
        holder = held.get("holderIdentity")
        renewed = parse_time(held.get("renewTime"))
        duration = int(held.get("leaseDurationSeconds") or self.timings.lease_seconds)
        expired = renewed is None or now - renewed > timedelta(seconds=duration)
        if holder and holder != self.identity and not expired:
            return False  # a released Lease (no holder) is free at once
        if leading and holder == self.identity and self._should_let_go is not None and self._should_let_go(current):
            return False  # not renewed: it expires, and the replica that asked for it takes it
        new_spec = {**held, **spec}
        if holder != self.identity:
            new_spec["acquireTime"] = format_time(now)
            new_spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0) + 1
        current["spec"] = new_spec
        try:
            await self._api.replace(f"{path}/{self._name}", current)
        except ApiError as error:
            if error.status == 409 and holder == self.identity:
                raise Conflict(409, error.message) from None  # read again once (above)
            if error.status == 409:
                return False
            raise
        return True
