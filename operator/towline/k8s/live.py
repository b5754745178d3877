"""Streams from the API server for a person's terminal: watches of objects and a pod's log as it is written.

`kubectl towline watch` and `logs -f` wait on these instead of polling: an
object's change, a new step pod or a new log line reaches the person as the API
server learns of it. Both read the raw HTTP stream in chunks (a watch event may
be larger than a line reader's limit) through the same authenticated client as
every other call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import aiohttp

from towline.k8s.client import TRANSPORT_ERRORS, ApiError, ApiUnavailable, KubeApi

JSON = dict[str, Any]

WATCH_SECONDS = 240
"""How long the API server keeps one watch open before the next is opened from the last resourceVersion."""

LISTED, SYNCED = "LISTED", "SYNCED"
"""Event types of `watch_objects` besides the API server's ADDED/MODIFIED/DELETED: an object of a
(re-)list, and the end of that list (the watch begins)."""

_CONNECT = aiohttp.ClientTimeout(total=None, connect=30, sock_connect=30)
"""A stream may stay open as long as its pod runs; only connecting is bounded."""


class _Gone(Exception):  # noqa: N818 - the API server's 410: the resourceVersion is too old
    pass


async def _open(api: KubeApi, path: str, query: Mapping[str, str], timeout: aiohttp.ClientTimeout) -> Any:
    try:
        response = await api.send("GET", path, query=query, accept="*/*", timeout=timeout)
    except TRANSPORT_ERRORS as error:
        raise ApiUnavailable(error) from error
    if response.status >= 400:
        raw: bytes = await response.read()
        response.release()
        try:
            message = str(json.loads(raw).get("message") or "")
        except ValueError:
            message = raw[:500].decode(errors="replace")
        raise (_Gone() if response.status == 410 else ApiError(response.status, message))
    return response


async def _lines(response: Any) -> AsyncIterator[bytes]:
    """The response body split at newlines, without a limit on a line's length."""
    pending = b""
    try:
        async for chunk in response.content.iter_any():
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line
        if pending:
            yield pending
    finally:
        response.release()


async def watch_objects(
    api: KubeApi, path: str, *, field_selector: str | None = None, label_selector: str | None = None,
    page_size: int | None = None,
) -> AsyncGenerator[tuple[str, JSON], None]:
    """Every object of the collection at `path` (LISTED, then SYNCED once listed), then each change, until the
    caller stops iterating.

    The watch starts at the list's resourceVersion, so nothing between the two is missed; when the
    API server closes it, the next starts where it ended. When that version is too old (410 Gone)
    or the connection breaks, the collection is listed again and its objects come again as LISTED.
    `page_size` lists in pages (one consistent snapshot), so a large collection is never one answer.
    """
    selectors = {key: value for key, value in (("fieldSelector", field_selector),
                                                 ("labelSelector", label_selector)) if value}
    while True:
        query = {**selectors, **({"limit": str(page_size)} if page_size else {})}
        while True:
            listing = await api.request("GET", path, query=query)
            for item in listing.get("items", []):
                yield LISTED, item
            token = listing["metadata"].get("continue")
            if not token:
                break
            query = {**query, "continue": token}
        version: str = listing["metadata"]["resourceVersion"]
        yield SYNCED, {}
        try:
            while True:
                query = {**selectors, "watch": "true", "resourceVersion": version,
                         "allowWatchBookmarks": "true", "timeoutSeconds": str(WATCH_SECONDS)}
                response = await _open(api, path, query, aiohttp.ClientTimeout(total=WATCH_SECONDS + 30,
                                                                               sock_connect=30))
                async for line in _lines(response):
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise _Gone
                        raise ApiError(int(obj.get("code") or 500), str(obj.get("message") or "watch failed"))
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if kind != "BOOKMARK":
                        yield str(kind), obj
        except (_Gone, ApiUnavailable, *TRANSPORT_ERRORS):
            await asyncio.sleep(0.2)  # list again: this version is gone, or the connection broke


async def follow_log(api: KubeApi, path: str) -> AsyncIterator[str]:
    """A pod's log (`path` is its log subresource) line by line as the container writes it, until it exits."""
    response = await _open(api, path, {"follow": "true"}, _CONNECT)
    try:
        async for line in _lines(response):
            yield line.decode(errors="replace").rstrip("\r")
    except TRANSPORT_ERRORS as error:
        raise ApiUnavailable(error) from error
