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

from towline.k8s import live
from towline.k8s.client import KubeApi
from towline.plugin.ui import person, sse
from towline.plugin.ui.server import build_app_behind

JSON = dict[str, Any]
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
