"""An API server that cannot be reached is an ApiError (503), never a transport exception: callers (the
Lease elector, reconciles, the ingress) handle ApiError only. The client reports at once and never retries
(the work queue does): one request per call, with the server's Retry-After passed on. Real sockets: a
loopback port nobody listens on, then a server that answers 429."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from towline.k8s.client import ApiError, ApiUnavailable, KubeApi
from towline.k8s.connection import Connection
from towline_dev.processes import free_loopback_port


def api_at(port: int) -> KubeApi:
    return KubeApi(Connection(server=f"http://127.0.0.1:{port}"))


async def call(port: int, method: str = "GET") -> Any:
    api = api_at(port)
    try:
        return await api.request(method, "/api/v1/namespaces/team/configmaps/x", body={} if method != "GET" else None)
    finally:
        await api.close()


class Busy(BaseHTTPRequestHandler):
    """The API server's priority and fairness: 429 with Retry-After, and a count of the requests."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Busy.seen.append(self.path)
        payload = json.dumps({"kind": "Status", "message": "too many requests, please try again later"}).encode()
        self.send_response(429)
        self.send_header("Retry-After", "3")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def busy_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_refused_connection_ends_as_an_api_error_503(method: str) -> None:
    with pytest.raises(ApiUnavailable) as raised:
        asyncio.run(call(free_loopback_port(), method))
    assert isinstance(raised.value, ApiError) and raised.value.status == 503 and raised.value.transient
    assert "cannot reach the API server" in raised.value.message


def test_a_busy_server_is_asked_once_and_its_retry_after_is_reported(busy_server: int) -> None:
    Busy.seen.clear()
    with pytest.raises(ApiError) as raised:
        asyncio.run(call(busy_server))
    assert (raised.value.status, raised.value.transient, raised.value.retry_after) == (429, True, 3.0)
    assert len(Busy.seen) == 1, "the client does not retry; the work queue decides"
