"""Lease-based leader election (coordination.k8s.io/v1), as client-go does it.

Two replicas must never both act. kopf's peering only pauses lower-priority
peers and needs cluster-wide CRDs of its own; a Lease is the Kubernetes
standard, is namespaced, and the API server's optimistic concurrency on its
resourceVersion decides every race. A replica acts only while it holds a
Lease that it renewed less than `lease_seconds` ago, and it gives up acting
before the Lease could expire for others (`renew_deadline < lease_seconds`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from towline.k8s.client import LEASES, ApiError, KubeApi
from towline_connectors.wire import parse_rfc3339, rfc3339

log = logging.getLogger(__name__)


def _format(moment: datetime) -> str:
    """A Lease's times are MicroTime."""
    return rfc3339(moment, timespec="microseconds")


def _parse(text: str | None) -> datetime | None:
    return parse_rfc3339(text) if text else None


class LeaderElector:
    """Acquires and renews one Lease; `is_leader` is what workers check before acting."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int = 15,
        renew_every: float = 3.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._lease_seconds = lease_seconds
        self._renew_every = renew_every
        self._clock = clock
        self._renewed_at: datetime | None = None
        self.became_leader = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        if self._renewed_at is None:
            return False
        # Stop acting well before others may take over.
        return self._clock() - self._renewed_at < timedelta(seconds=self._lease_seconds * 2 / 3)

    async def run(self) -> None:
        while True:
            was_leader = self.is_leader
            try:
                if await self._try_acquire_or_renew():
                    self._renewed_at = self._clock()
                    if not was_leader:
                        log.info("acquired leadership as %s", self.identity)
                        self.became_leader.set()
                elif was_leader:
                    log.warning("lost leadership; stopping all actions")
                    self._renewed_at = None
                    self.became_leader.clear()
            except ApiError as error:
                log.warning("leader election: %s", error)
            await asyncio.sleep(self._renew_every)

    async def _try_acquire_or_renew(self) -> bool:
        path = LEASES.path(self._namespace)
        now = self._clock()
        current = await self._api.get(f"{path}/{self._name}")
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._lease_seconds,
            "renewTime": _format(now),
        }
        if current is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": {**spec, "acquireTime": _format(now), "leaseTransitions": 0},
            }
            _, created = await self._api.create(path, body)
            return created
        held = current.get("spec", {})
        holder = held.get("holderIdentity")
        renewed = _parse(held.get("renewTime"))
        duration = int(held.get("leaseDurationSeconds") or self._lease_seconds)
        expired = renewed is None or now - renewed > timedelta(seconds=duration)
        if holder != self.identity and not expired:
            return False
        new_spec = {**held, **spec}
        if holder != self.identity:
            new_spec["acquireTime"] = _format(now)
            new_spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0) + 1
        current["spec"] = new_spec
        try:
            await self._api.replace(f"{path}/{self._name}", current)
        except ApiError as error:
            if error.status == 409:
                return False
            raise
        return True
