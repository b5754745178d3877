"""A browser leaving a live page (towline.plugin.ui.sse): the stream ends quietly, with nothing logged as an error.

`kubectl towline ui` printed aiohttp's "Error handling request ... Cannot write to closing transport" traceback each
time a person left a live page: the stream's next write found the connection closed. A person leaving is normal."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
from aiohttp import web

from towline.jsontypes import JSON
from towline.k8s import live
from towline.k8s.client import KubeApi
from towline.k8s.connection import Connection
from towline.plugin.ui import person, sse
from towline.plugin.ui.server import build_app_behind

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class OnePerson:
    async def admit(self, request: web.Request) -> person.Person:
        return person.Person(api=cast(KubeApi, object()), user="alice", csrf="token", default_namespace="team")


def run(name: str) -> JSON:
    return {"metadata": {"name": name, "namespace": "team", "creationTimestamp": "2026-12-07T06:00:00Z"},
            "spec": {"workflowRef": {"name": "orders"}}, "status": {"phase": "Running"}}


def test_a_browser_leaving_a_live_page_ends_its_stream_without_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    left = asyncio.Event()

    async def watch(api: KubeApi, path: str, **_: Any) -> AsyncIterator[tuple[str, JSON]]:
        """The runs listed, then, once the browser has left, a change after each turn of the loop: the writes the
        stream would make while runs change."""
        yield live.LISTED, run("first")
        yield live.SYNCED, {}
        await left.wait()
        while True:
            yield "MODIFIED", run("first")
            await asyncio.sleep(0)

    monkeypatch.setattr(live, "watch_objects", watch)

    async def main() -> None:
        ended = asyncio.Event()

        @web.middleware
        async def outermost(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                return await handler(request)
            finally:
                ended.set()  # aiohttp logs a handler's error before its task next yields: after this, before our wait

        app = build_app_behind(OnePerson())
        app.middlewares.insert(0, outermost)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /events/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
            await writer.drain()
            assert b"event: snapshot" in await reader.readuntil(b"event: snapshot"), "the stream had begun"
            writer.close()
            await writer.wait_closed()
            left.set()
            await asyncio.wait_for(ended.wait(), 60)
        finally:
            await runner.cleanup()

    asyncio.run(main())
    errors = [(record.name, record.getMessage()) for record in caplog.records if record.levelno >= logging.WARNING]
    assert errors == [], "a browser leaving is no error"
    assert any(record.name == sse.__name__ and "the browser closed the stream" in record.getMessage()
               and record.levelno == logging.DEBUG for record in caplog.records), "the stream saw the close"


class ApiStandIn:
    """A local HTTP server in the API server's place: it lists one run, then holds every watch open without an
    event (a quiet page), and says when the view closes a watch's connection."""

    def __init__(self) -> None:
        self.watches = 0
        self.closed = asyncio.Event()

    async def runs(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response({"kind": "WorkflowRunList", "metadata": {"resourceVersion": "10"},
                                      "items": [run("first")]})
        self.watches += 1
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            await asyncio.Event().wait()  # quiet: no event until the watch's connection closes
        finally:
            self.closed.set()  # this server cancels its handler when the connection closes
        return response


class PersonOf:
    def __init__(self, api: KubeApi) -> None:
        self.api = api

    async def admit(self, request: web.Request) -> person.Person:
        return person.Person(api=self.api, user="alice", csrf="token", default_namespace="team")


def test_a_browser_leaving_a_quiet_live_page_closes_the_watch_behind_it(caplog: pytest.LogCaptureFixture) -> None:
    """aiohttp cancels no handler when its client goes: without a look at the connection, the stream of a page whose
    runs do not change waited on its watch until the API server ended it (WATCH_SECONDS), and then opened the next,
    one watch per departed viewer piling up on the API server."""

    caplog.set_level(logging.DEBUG)

    async def main() -> None:
        stand_in = ApiStandIn()
        api_app = web.Application()
        api_app.router.add_get("/apis/towline.dev/v1alpha1/namespaces/team/workflowruns", stand_in.runs)
        api_runner = web.AppRunner(api_app, handler_cancellation=True)
        await api_runner.setup()
        await web.TCPSite(api_runner, "127.0.0.1", 0).start()
        api = KubeApi(Connection(server=f"http://127.0.0.1:{api_runner.addresses[0][1]}"))
        view = web.AppRunner(build_app_behind(PersonOf(api)), access_log=None, shutdown_timeout=1.0)
        await view.setup()
        await web.TCPSite(view, "127.0.0.1", 0).start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", view.addresses[0][1])
            writer.write(b"GET /events/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
            await writer.drain()
            assert b"event: snapshot" in await reader.readuntil(b"event: snapshot"), "the stream had begun"
            writer.close()
            await writer.wait_closed()
            await asyncio.wait_for(stand_in.closed.wait(), 30)  # bounded only so a failure cannot hang
            assert stand_in.watches == 1, "the stream ended with its watch: none opened again"
        finally:
            await view.cleanup()
            await api.close()
            await api_runner.cleanup()

    asyncio.run(main())
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == [], \
        "a browser leaving is no error"
