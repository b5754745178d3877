"""An httpx client whose every TCP connection goes through the SSRF guard.

The guard sits in the httpcore network backend, the one place all connections
are opened: the hostname is resolved once, each address is validated, and the
socket is opened to the validated address. TLS still runs over that socket with
the original hostname for SNI and certificate checks. Proxy variables are
ignored (`trust_env=False`): a proxy would do its own, unguarded resolution.

This module must never open a connection to an address the guard did not return.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpcore

from towline_connectors.httpxlib import httpx
from towline_connectors.netguard import NetGuard
from towline_connectors.runtime import SideEffectTracker, run_blocking

# Opens a TCP stream to an already validated IP address; tests replace it to
# stand in for the internet at the socket layer.
Connector = Callable[[str, int, float | None], Awaitable[httpcore.AsyncNetworkStream]]


async def default_connector(address: str, port: int, timeout: float | None) -> httpcore.AsyncNetworkStream:
    return await httpcore.AnyIOBackend().connect_tcp(address, port, timeout=timeout)


class TrackingStream(httpcore.AsyncNetworkStream):
    """Delegates to a real stream and records that request bytes left the process."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, tracker: SideEffectTracker) -> None:
        self._inner = inner
        self._tracker = tracker

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._tracker.mark_sent()
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # The handshake is not a request: only later writes count as sent.
        tls = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        return TrackingStream(tls, self._tracker)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolve once, validate every address, connect to a validated one."""

    def __init__(
        self,
        guard: NetGuard,
        tracker: SideEffectTracker,
        connector: Connector | None = None,
    ) -> None:
        self._guard = guard
        self._tracker = tracker
        self._connector = connector or default_connector

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await run_blocking(self._guard.resolve, host, port)
        failures: list[str] = []
        for address in addresses:
            try:
                stream = await self._connector(str(address), port, timeout)
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
                failures.append(f"{address}: {exc}")
                continue
            return TrackingStream(stream, self._tracker)
        raise httpcore.ConnectError(f"could not connect to {host}:{port} ({'; '.join(failures)})")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable from a step")

    async def sleep(self, seconds: float) -> None:
        await httpcore.AnyIOBackend().sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport (request mapping, error mapping) over the guarded backend.

    httpx 0.28 has no public parameter for the network backend, so the pool is
    replaced after construction; the version is pinned in pyproject.toml.
    """

    def __init__(self, backend: GuardedBackend, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            network_backend=backend,
            max_connections=10,
        )


def build_client(
    guard: NetGuard,
    tracker: SideEffectTracker,
    ssl_context: ssl.SSLContext,
    connector: Connector | None = None,
) -> httpx.AsyncClient:
    """A client that never follows redirects itself and never consults proxy variables."""
    transport = GuardedTransport(GuardedBackend(guard, tracker, connector), ssl_context)
    return httpx.AsyncClient(transport=transport, trust_env=False, follow_redirects=False)
