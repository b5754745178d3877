"""The one list+watch (towline.k8s.reflector) against the real API server: a watch the API server ends is opened
again from where it ended, without a list, and the changes after it still arrive. The API client is the real one,
counting the requests it sends. (410 Gone, a broken connection and a refusal: tests/unit/k8s/test_reflector.py.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest

from towline.k8s.client import CONFIG_MAPS, KubeApi
from towline.k8s.reflector import LISTED, SYNCED, Backoff, reflect
from towline_dev.controlplane import ControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.local_only]

JSON = dict[str, Any]


class Counted(KubeApi):
    """The real client, noting each list and each watch (with the resourceVersion it starts from)."""

    lists: int = 0
    watches: list[str]
    watched: asyncio.Event

    def note(self, watches_awaited: int) -> None:
        self.watches, self.watched, self.awaited = [], asyncio.Event(), watches_awaited

    async def request(self, method: str, path: str, *, body: Any = None, query: Mapping[str, str] | None = None,
                      content_type: str = "application/json") -> JSON:
        answer = await super().request(method, path, body=body, query=query, content_type=content_type)
        if method != "GET":
            return answer
        self.lists += 1
        return answer

    async def send(self, method: str, path: str, *, query: Mapping[str, str] | None, accept: str,
                   content_type: str | None = None, data: bytes | None = None,
                   timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        if query and query.get("watch") == "true":
            self.watches.append(query["resourceVersion"])
            if len(self.watches) >= self.awaited:
                self.watched.set()
        return await super().send(method, path, query=query, accept=accept, content_type=content_type, data=data,
                                  timeout=timeout)


def config_map(namespace: str, name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


async def _follow(plane: ControlPlane, namespace: str, *, watch_seconds: int,
                  watches_awaited: int) -> tuple[list[tuple[str, str]], Counted]:
    """The stream's events (type, name) up to the ADDED of a ConfigMap created once `watches_awaited` watches
    were opened; the client that counted."""
    api = await Counted.connect(str(plane.kubeconfig), context="admin")
    assert isinstance(api, Counted)
    api.note(watches_awaited)
    await api.create(CONFIG_MAPS.path(namespace), config_map(namespace, "before"))
    seen: list[tuple[str, str]] = []
    added = asyncio.Event()

    async def consume() -> None:
        async for kind, body in reflect(api, CONFIG_MAPS.path(namespace), watch_seconds=watch_seconds,
                                        backoff=Backoff(initial=0.05)):
            name = str((body.get("metadata") or {}).get("name", ""))
            seen.append((kind, name))
            if (kind, name) == ("ADDED", "after"):
                added.set()

    stream = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(api.watched.wait(), 60)
        await api.create(CONFIG_MAPS.path(namespace), config_map(namespace, "after"))
        await asyncio.wait_for(added.wait(), 60)
        return [event for event in seen if event[1] != "kube-root-ca.crt"], api
    finally:
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)
        await api.close()


def test_a_watch_the_api_server_ends_is_opened_again_from_where_it_ended_without_a_list(
        control_plane: ControlPlane, namespace: str) -> None:
    seen, api = asyncio.run(_follow(control_plane, namespace, watch_seconds=1,
                                    watches_awaited=3))
    assert seen == [(LISTED, "before"), (SYNCED, ""), ("ADDED", "after")]
    assert api.lists == 1, "two watches ended by the API server (timeoutSeconds=1) and no list again"
    assert len(api.watches) >= 3 and all(api.watches)
