"""An API server that cannot be reached is an ApiError (503) after bounded retries, never a
transport exception: callers (the Lease elector, reconciles, the ingress) handle ApiError only.
Real sockets: a loopback port nobody listens on, then a server that comes up during the retries."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes_asyncio import client

from towline.k8s.client import ApiError, ApiUnavailable, KubeApi
from towline_dev.processes import free_loopback_port


def api_at(port: int) -> KubeApi:
    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    return KubeApi(client.ApiClient(configuration=configuration))


async def call(port: int, method: str = "GET") -> Any:
    api = api_at(port)
    try:
        return await api.request(method, "/api/v1/namespaces/team/configmaps/x", body={} if method != "GET" else None)
    finally:
        await api.close()


class Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        payload = json.dumps({"kind": "ConfigMap", "metadata": {"name": "x"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def late_server() -> Iterator[int]:
    """A port whose server starts listening 0.3 s from now (an API server restarting)."""
    port = free_loopback_port()
    servers: list[ThreadingHTTPServer] = []

    def serve() -> None:
        time.sleep(0.3)
        server = ThreadingHTTPServer(("127.0.0.1", port), Answer)
        servers.append(server)
        server.serve_forever()

    threading.Thread(target=serve, daemon=True).start()
    yield port
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_refused_connection_ends_as_an_api_error_503(method: str) -> None:
    with pytest.raises(ApiUnavailable) as raised:
        asyncio.run(call(free_loopback_port(), method))
    assert isinstance(raised.value, ApiError) and raised.value.status == 503
    assert "cannot reach the API server" in raised.value.message


def test_a_server_that_comes_back_during_the_retries_answers_the_same_call(late_server: int) -> None:
    assert asyncio.run(call(late_server))["metadata"]["name"] == "x"
