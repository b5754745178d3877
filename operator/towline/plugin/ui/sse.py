"""Server-sent events fed by API watches: the list once, then every change as it happens.

No polling: each open page holds one watch on the API server, made as the
person. When the server ends a watch the loop continues from the last
resourceVersion; when that version has expired (410) it lists again and sends
a fresh snapshot. The loop ends when the browser goes away: at the next write (it
finds the connection closed: ClientGone, which the view's middleware answers
quietly, as it is no error), or within STREAM_CHECK_SECONDS when nothing is
written, the watch behind it closed with it; and in the cluster within
STREAM_CHECK_SECONDS of the person's session ending (sign-out, expiry).

aiohttp cancels no handler when its client goes (`handler_cancellation` is off),
and stays so here: turned on, it would cancel every handler, a write to the API
server included, wherever it stands when a browser leaves. Only a stream's own
check ends it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from towline.jsontypes import JSON
from towline.k8s import live
from towline.k8s.client import ApiError, KubeApi
from towline.plugin.ui.person import PERSON

log = logging.getLogger(__name__)

Send = Callable[[str, Any], Awaitable[None]]


class ClientGone(Exception):  # noqa: N818 - says what happened
    """The browser closed a live stream (left or reloaded the page): the stream's handler ends with `response`,
    the stream as far as it went. A person leaving a page is no error."""

    def __init__(self, response: web.StreamResponse) -> None:
        super().__init__("the browser closed the stream")
        self.response = response


STREAM_CHECK_SECONDS = 1.0
"""How soon a stream ends after its browser left while nothing changed (its watch stays quiet, so no write finds the
connection closed), or after its session did (sign-out, expiry): a copied cookie's open stream stops too."""


async def open_stream(request: web.Request) -> tuple[web.StreamResponse, Send]:
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no",
    })
    await response.prepare(request)
    who = request.get(PERSON)
    _end_when_over(request, who.alive if who is not None else None)

    async def send(event: str, data: Any) -> None:
        payload = json.dumps(data, separators=(",", ":"))
        try:
            await response.write(f"event: {event}\ndata: {payload}\n\n".encode())
        except ConnectionError as closed:  # aiohttp's "Cannot write to closing transport", a reset, a broken pipe
            log.debug("%s %s: the browser closed the stream (%s)", request.method, request.path, closed)
            raise ClientGone(response) from None

    return response, send


def _end_when_over(request: web.Request, alive: Callable[[], bool] | None) -> None:
    """Cancel the stream's handler once its browser has gone or its session (`alive`, if it has one) has ended:
    the watch or log it follows is closed as the handler unwinds. The check stops with the handler."""
    handler = asyncio.current_task()
    assert handler is not None

    async def watch() -> None:
        while not handler.done():
            await asyncio.sleep(STREAM_CHECK_SECONDS)
            transport = request.transport
            if transport is None or transport.is_closing():
                log.debug("%s %s: the browser closed the stream", request.method, request.path)
                handler.cancel()
                return
            if alive is not None and not alive():
                handler.cancel()
                return

    _WATCHERS.add(watcher := asyncio.get_running_loop().create_task(watch()))
    watcher.add_done_callback(_WATCHERS.discard)


_WATCHERS: set[asyncio.Task[None]] = set()
"""The running checks (the loop keeps only weak references to tasks)."""


async def follow_collection(
    api: KubeApi, path: str, send: Send, *,
    snapshot: Callable[[list[JSON]], Any], change: Callable[[str, JSON], Any],
    field_selector: str | None = None,
) -> None:
    """Send `snapshot(items)` as event `snapshot`, then `change(type, object)` as `change` for each event.

    A refusal (the person may not list or watch these) ends the stream with a `problem` event
    carrying the API server's message: the response has started, so it cannot become an error status.
    """
    items: list[JSON] = []
    try:
        async for kind, obj in live.watch_objects(api, path, field_selector=field_selector):
            if kind == live.LISTED:
                items.append(obj)
            elif kind == live.SYNCED:  # a (re-)list is complete: the page replaces what it shows
                await send("snapshot", snapshot(items))
                items = []
            else:
                await send("change", change(kind, obj))
    except ApiError as error:
        await send("problem", {"status": error.status, "message": error.message})
