"""What `KubeApi` sends over aiohttp: the credential's Authorization as it stands for each request (asked again
before every request, as a rotating service account token or a credential plugin needs), its User-Agent, the
query, and the body as JSON bytes. Real sockets: a loopback server that
records each request."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

import pytest

from towline.k8s.client import ApiError, Conflict, KubeApi, encode_body
from towline.k8s.connection import Connection


class Recorder(BaseHTTPRequestHandler):
    """Answers every request with 200 and the object it was sent (409 for a path ending in /taken)."""

    seen: ClassVar[list[dict[str, Any]]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {key.lower(): value for key, value in self.headers.items()}
        Recorder.seen.append({"method": self.command, "path": self.path, "headers": headers, "body": raw})
        taken = urlsplit(self.path).path.endswith("/taken")
        if urlsplit(self.path).path.startswith("/apis/missing.example"):
            # What kube-apiserver answers for an API group it does not serve (a CRD not installed): plain text.
            self._plain(404, b"404 page not found\n")
            return
        if urlsplit(self.path).path.endswith("/garbled"):
            self._plain(200, b"<html>a proxy's page</html>")
            return
        payload = json.dumps({"kind": "Status", "message": "already exists"} if taken
                             else {"echo": json.loads(raw) if raw else None}).encode()
        self.send_response(409 if taken else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _plain(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_PATCH(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    Recorder.seen.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


class NextToken:
    """A credential that hands out the next token of `tokens` on every request."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens

    async def authorization(self) -> str | None:
        return f"Bearer {self.tokens.pop(0)}"


def api_at(port: int, tokens: list[str]) -> KubeApi:
    return KubeApi(Connection(server=f"http://127.0.0.1:{port}", credential=NextToken(tokens)))


def test_each_request_carries_the_refreshed_token_the_query_and_the_body_as_json(server: int) -> None:
    async def scenario() -> list[Any]:
        api = api_at(server, ["first", "second", "third"])
        try:
            return [
                await api.request("GET", "/api/v1/namespaces/team/pods", query={"labelSelector": "a=b,c in (d)"}),
                await api.merge_patch("/apis/towline.dev/v1alpha1/namespaces/team/workflowruns/r/status",
                                      {"status": {"phase": "Running", "note": "ü"}}),
                await api.request("POST", "/api/v1/namespaces/team/configmaps", body={"when": datetime(2026, 1, 2,
                                                                                                       tzinfo=UTC)}),
            ]
        finally:
            await api.close()

    answers = asyncio.run(scenario())
    get, patch, post = Recorder.seen
    assert [r["headers"]["authorization"] for r in Recorder.seen] == ["Bearer first", "Bearer second", "Bearer third"]
    assert all(r["headers"]["user-agent"] == "towline" for r in Recorder.seen)
    assert get["method"] == "GET" and get["body"] == b"" and get["headers"]["accept"] == "application/json"
    assert parse_qsl(urlsplit(get["path"]).query) == [("labelSelector", "a=b,c in (d)")]
    assert patch["method"] == "PATCH"
    assert patch["headers"]["content-type"] == "application/merge-patch+json"
    assert json.loads(patch["body"]) == {"status": {"phase": "Running", "note": "ü"}}
    assert json.loads(post["body"]) == {"when": "2026-01-02T00:00:00+00:00"}
    assert answers[1] == {"echo": {"status": {"phase": "Running", "note": "ü"}}}


def test_a_conflict_is_still_a_conflict_and_a_delete_sends_its_options(server: int) -> None:
    async def scenario() -> None:
        api = api_at(server, ["t1", "t2"])
        try:
            with pytest.raises(Conflict, match="already exists"):
                await api.request("PUT", "/api/v1/namespaces/team/configmaps/taken", body={"a": 1})
            assert await api.delete("/api/v1/namespaces/team/configmaps/x") is True
        finally:
            await api.close()

    asyncio.run(scenario())
    assert json.loads(Recorder.seen[1]["body"]) == {"kind": "DeleteOptions", "apiVersion": "v1",
                                                    "propagationPolicy": "Background"}


def test_an_answer_that_is_not_json_is_an_api_error_naming_what_came(server: int) -> None:
    """A 404 in plain text (the API group is not served: the CRDs are not installed) is a 404 ApiError, which
    `get` takes as "not there"; a 200 whose body is not JSON is an ApiError too, never a JSONDecodeError that
    a caller's `except ApiError` lets through."""
    async def scenario() -> None:
        api = api_at(server, ["t1", "t2", "t3"])
        try:
            with pytest.raises(ApiError) as missing:
                await api.request("GET", "/apis/missing.example/v1/widgets")
            assert missing.value.status == 404 and missing.value.message == "404 page not found"
            assert await api.get("/apis/missing.example/v1/namespaces/team/widgets/w") is None
            with pytest.raises(ApiError, match="is not JSON: <html>a proxy's page</html>"):
                await api.request("GET", "/api/v1/namespaces/team/configmaps/garbled")
        finally:
            await api.close()

    asyncio.run(scenario())


def test_a_body_that_is_not_json_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        encode_body({"x": object()})
    assert encode_body({"a": [1, (2, 3)], "b": None}) == b'{"a":[1,[2,3]],"b":null}'


def test_the_proxy_the_environment_names_is_used(server: int,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Looked up once per connection instead of per request, but still honoured: the request goes to the proxy."""
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server}")

    async def scenario() -> None:
        api = KubeApi(Connection(server="http://api.cluster.invalid:6443"))
        try:
            await api.request("GET", "/api/v1/namespaces/team/pods")
            await api.request("GET", "/api/v1/namespaces/team/jobs")
        finally:
            await api.close()

    asyncio.run(scenario())
    assert [r["path"] for r in Recorder.seen] == ["http://api.cluster.invalid:6443/api/v1/namespaces/team/pods",
                                                  "http://api.cluster.invalid:6443/api/v1/namespaces/team/jobs"]
