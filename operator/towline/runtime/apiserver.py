"""The API server's addresses as the operator last read them, refreshed while it runs.

Read once when the operator starts and again every `period` seconds (an API
server moves rarely: a control-plane upgrade, a new endpoint); on a change the
operator also carves the new addresses out of the policies of steps already
running. Fail closed:
until a read has succeeded, `networks()` raises, so no step Job is created with
a policy that might leave the API server open; the run's reconcile fails and is
retried with backoff, and the log says what to fix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from towline.k8s.apiserver import host_networks
from towline.k8s.client import ApiError, WriteFenced

log = logging.getLogger(__name__)

REFRESH_SECONDS = 60.0
RETRY_SECONDS = 5.0


class ApiServerUnknown(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """No successful read yet: a step policy cannot except the API server."""


class ApiServerAddresses:
    def __init__(self, read: Callable[[], Awaitable[tuple[str, ...]]], *, period: float = REFRESH_SECONDS,
                 retry: float = RETRY_SECONDS,
                 changed: Callable[[tuple[str, ...]], Awaitable[None]] | None = None) -> None:
        """`changed` is told the new networks when a refresh finds other addresses than the last good one."""
        self._read = read
        self._changed = changed
        self._period = period
        self._retry = retry
        self._addresses: tuple[str, ...] | None = None
        self._problem = "not read yet"

    @property
    def addresses(self) -> tuple[str, ...] | None:
        return self._addresses

    def networks(self) -> tuple[str, ...]:
        """The addresses as /32 and /128 networks; raises ApiServerUnknown before the first good read."""
        if self._addresses is None:
            raise ApiServerUnknown(
                f"the API server's addresses are not known ({self._problem}); no step starts until every step "
                "NetworkPolicy can except them. The operator reads Service, EndpointSlice and Endpoints "
                "'kubernetes' in namespace default (the chart's Role towline-operator-api-server grants it)")
        return host_networks(self._addresses)

    async def refresh(self) -> bool:
        """One read; True when it succeeded. A failed read keeps what an earlier one found."""
        try:
            found = await self._read()
        except ApiError as error:
            self._problem = f"reading them failed with {error}"
            log.error("cannot read the API server's addresses: %s; step NetworkPolicies must except them, "
                      "so no step starts until this succeeds", error)
            return False
        if not found:
            self._problem = "Service and endpoints 'kubernetes' in namespace default name no IP address"
            log.error("the API server's addresses are unknown: %s", self._problem)
            return False
        previous, self._addresses = self._addresses, found
        if found == previous:
            return True
        log.info("API server addresses: %s; every new step NetworkPolicy excepts them", ", ".join(found))
        if previous is not None and self._changed is not None:
            try:
                await self._changed(host_networks(found))
            except (ApiError, WriteFenced) as error:
                log.warning("could not update the running steps' NetworkPolicies for the new API server "
                            "addresses: %s", error)
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._period if self._addresses is not None else self._retry)
            await self.refresh()
