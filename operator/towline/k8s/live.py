"""Streams from the API server for a person's terminal: watches of objects and a pod's log as it is written.

`kubectl towline watch` and `logs -f` wait on these instead of polling: an
object's change, a new step pod or a new log line reaches the person as the API
server learns of it. Both read the raw HTTP stream in chunks (a watch event may
be larger than a line reader's limit) through the same authenticated client as
every other call. A watch is the one list+watch of every process
(towline.k8s.reflector), as a person's: a refusal or an unreachable API server
ends it with the error.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import aiohttp

from towline.jsontypes import JSON
from towline.k8s.client import TRANSPORT_ERRORS, ApiUnavailable, KubeApi
from towline.k8s.reflector import LISTED, SYNCED, WATCH_SECONDS, lines, open_stream, reflect

__all__ = ["LISTED", "SYNCED", "WATCH_SECONDS", "follow_log", "watch_objects"]


_CONNECT = aiohttp.ClientTimeout(total=None, connect=30, sock_connect=30)
"""A stream may stay open as long as its pod runs; only connecting is bounded."""


def watch_objects(
    api: KubeApi, path: str, *, field_selector: str | None = None, label_selector: str | None = None,
    page_size: int | None = None,
) -> AsyncGenerator[tuple[str, JSON], None]:
    """Every object of the collection at `path` (LISTED, then SYNCED once listed), then each change, until the
    caller stops iterating; listed again after 410 Gone, opened again where a broken connection left off.
    `page_size` lists in pages (one consistent snapshot), so a large collection is never one answer."""
    return reflect(api, path, field_selector=field_selector, label_selector=label_selector, page_size=page_size,
                   persistent=False, what="person's")


async def follow_log(api: KubeApi, path: str, query: dict[str, str] | None = None) -> AsyncIterator[str]:
    """A pod's log (`path` is its log subresource) line by line as the container writes it, until it exits;
    `query`: more of the log API's parameters (tailLines, sinceSeconds, timestamps, container)."""
    response = await open_stream(api, path, {**(query or {}), "follow": "true"}, _CONNECT)
    try:
        async for line in lines(response):
            yield line.decode(errors="replace").rstrip("\r")
    except TRANSPORT_ERRORS as error:
        raise ApiUnavailable(error) from error
