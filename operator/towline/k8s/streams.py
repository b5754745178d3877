"""Long-lived reads for a person's web view: watches and followed pod logs, as that person.

A watch is how the view stays live without polling: list once for a
resourceVersion, then take the API server's change events from there. Both
streams end when the server closes them; the caller decides whether to read
again. Never reads Secrets (callers pass only run, approval, workflow and pod paths).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from towline.k8s.client import TRANSPORT_ERRORS, ApiError, ApiUnavailable, KubeApi

JSON = dict[str, Any]

WATCH_SECONDS = 240
"""How long the API server keeps one watch open; a view reconnects after that."""


async def list_with_version(api: KubeApi, path: str, *, label_selector: str | None = None,
                            field_selector: str | None = None) -> tuple[list[JSON], str]:
    """The items at `path` and the resourceVersion a watch continues from."""
    query = {key: value for key, value in (("labelSelector", label_selector),
                                           ("fieldSelector", field_selector)) if value}
    listing = await api.request("GET", path, query=query)
    return list(listing.get("items") or []), str(listing["metadata"]["resourceVersion"])


async def watch(api: KubeApi, path: str, version: str, *, field_selector: str | None = None) -> AsyncIterator[JSON]:
    """Change events (`type`, `object`) after `version` until the server ends the watch.

    Bookmarks are dropped; an expired version (410) raises ApiError like any refusal.
    """
    query = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
             "timeoutSeconds": str(WATCH_SECONDS)}
    if field_selector:
        query["fieldSelector"] = field_selector
    async for line in _lines(api, path, query, timeout=WATCH_SECONDS + 30):
        event: JSON = json.loads(line)
        if event.get("type") == "ERROR":
            status = event.get("object") or {}
            raise ApiError(int(status.get("code") or 500), str(status.get("message") or "watch failed"))
        if event.get("type") != "BOOKMARK":
            yield event


async def follow_log(api: KubeApi, path: str, *, seconds: int) -> AsyncIterator[str]:
    """A pod's log lines as the kubelet writes them, for at most `seconds`."""
    async for line in _lines(api, path, {"follow": "true"}, timeout=seconds):
        yield line


async def _lines(api: KubeApi, path: str, query: Mapping[str, str], *, timeout: int) -> AsyncIterator[str]:
    try:
        response = await api.api_client.call_api(
            path, "GET", query_params=list(query.items()), header_params={"Accept": "application/json, */*"},
            auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout,
        )
    except TRANSPORT_ERRORS as error:
        raise ApiUnavailable(error) from error
    try:
        if response.status >= 400:
            raw = await response.read()
            try:
                message = str(json.loads(raw).get("message") or "")
            except ValueError:
                message = raw[:500].decode(errors="replace")
            raise ApiError(response.status, message)
        try:
            async for raw_line in response.content:
                line = raw_line.decode(errors="replace").rstrip("\n")
                if line:
                    yield line
        except TRANSPORT_ERRORS:
            return  # the stream's time is up or the server went away: the caller reads again
    finally:
        response.release()
