"""Server-sent events fed by API watches: the list once, then every change as it happens.

No polling: each open page holds one watch on the API server, made as the
person. When the server ends a watch the loop continues from the last
resourceVersion; when that version has expired (410) it lists again and sends
a fresh snapshot. The loop ends when the browser goes away.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from towline.k8s import live
from towline.k8s.client import ApiError, KubeApi

JSON = dict[str, Any]
Send = Callable[[str, Any], Awaitable[None]]


async def open_stream(request: web.Request) -> tuple[web.StreamResponse, Send]:
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no",
    })
    await response.prepare(request)

    async def send(event: str, data: Any) -> None:
        payload = json.dumps(data, separators=(",", ":"))
        await response.write(f"event: {event}\ndata: {payload}\n\n".encode())

    return response, send


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
