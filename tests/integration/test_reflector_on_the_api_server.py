"""The one list+watch (towline.k8s.reflector) against the real API server: a watch the API server ends is opened
again from where it ended, without a list, and the changes after it still arrive; a resourceVersion the restarted
API server no longer keeps is answered 410 Gone, and the collection is listed again with what changed meanwhile.
The API client is the real one, counting the requests it sends. (A broken connection and a refusal:
tests/unit/k8s/test_reflector.py.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import aiohttp
import pytest

from towline.jsontypes import JSON
from towline.k8s.client import CONFIG_MAPS, KubeApi
from towline.k8s.reflector import LISTED, SYNCED, Backoff, reflect
from towline_dev.binaries import BinarySet
from towline_dev.controlplane import ControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.local_only]



class Counted(KubeApi):
    """The real client, noting each list and each watch (with the resourceVersion it starts from, and the status
    the API server answered it with); a watch past `hold_after` waits for `released` before it is sent."""

    lists: int = 0
    watches: list[str]
    answers: list[int]
    watched: asyncio.Event
    held: asyncio.Event
    released: asyncio.Event
    hold_after: int | None = None

    def note(self, watches_awaited: int) -> None:
        self.watches, self.watched, self.awaited = [], asyncio.Event(), watches_awaited
        self.answers, self.held, self.released = [], asyncio.Event(), asyncio.Event()

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
        watch = bool(query and query.get("watch") == "true")
        if watch and query:
            self.watches.append(query["resourceVersion"])
            if len(self.watches) >= self.awaited:
                self.watched.set()
            if self.hold_after is not None and len(self.watches) > self.hold_after and not self.released.is_set():
                self.held.set()
                await self.released.wait()
        response = await super().send(method, path, query=query, accept=accept, content_type=content_type,
                                      data=data, timeout=timeout)
        if watch:
            self.answers.append(response.status)
        return response


def config_map(namespace: str, name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


Meanwhile = Callable[[Counted, str], Awaitable[None]]
"""What happens while the stream's held watch waits (given the client and the collection's path)."""


async def _follow(plane: ControlPlane, namespace: str, *, watch_seconds: int, watches_awaited: int,
                  meanwhile: Meanwhile | None = None) -> tuple[list[tuple[str, str]], Counted]:
    """The stream's events (type, name) up to the ADDED of a ConfigMap created once `watches_awaited` watches
    were opened; the client that counted. With `meanwhile`, the stream's second watch is held back until it ran."""
    api = await Counted.connect(str(plane.kubeconfig), context="admin")
    assert isinstance(api, Counted)
    api.note(watches_awaited)
    api.hold_after = 1 if meanwhile is not None else None
    path = CONFIG_MAPS.path(namespace)
    await api.create(path, config_map(namespace, "before"))
    seen: list[tuple[str, str]] = []
    added = asyncio.Event()

    async def consume() -> None:
        async for kind, body in reflect(api, path, watch_seconds=watch_seconds, backoff=Backoff(initial=0.05)):
            name = str((body.get("metadata") or {}).get("name", ""))
            seen.append((kind, name))
            if (kind, name) == ("ADDED", "after"):
                added.set()

    stream = asyncio.create_task(consume())
    try:
        if meanwhile is not None:
            await asyncio.wait_for(api.held.wait(), 60)
            await meanwhile(api, path)
            api.released.set()
        await asyncio.wait_for(api.watched.wait(), 60)
        await api.create(path, config_map(namespace, "after"))
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


@pytest.fixture(scope="module")
def own_plane(k8s_binaries: BinarySet) -> Iterator[ControlPlane]:
    """A control plane of its own: restarting the session's API server would disturb the other tests' clients."""
    own = ControlPlane(k8s_binaries, install_signal_handlers=False).start()
    yield own
    own.remove_state()


async def _cache_serves_watches(api: KubeApi, path: str) -> None:
    """Wait until the restarted API server's watch cache of the collection answers a watch (it answers 429 while it
    fills), so the held watch meets the cache rather than its start."""
    while True:
        listing = await KubeApi.request(api, "GET", path, query={"limit": "1"})  # uncounted, as below
        try:
            response = await KubeApi.send(  # past the counting client: this watch is the test's, not the stream's
                api, "GET", path, query={"watch": "true", "timeoutSeconds": "1",
                                         "resourceVersion": listing["metadata"]["resourceVersion"]},
                accept="*/*", timeout=aiohttp.ClientTimeout(total=30))
        except aiohttp.ClientError:
            response = None
        if response is not None:
            status = response.status
            response.release()
            if status == 200:
                return
        await asyncio.sleep(0.2)  # the cache fills from etcd: nothing to wait on but its answer


def restart_after_a_change(plane: ControlPlane, namespace: str) -> Meanwhile:
    """A ConfigMap is created and the API server restarts, so the version the held watch resumes from is older
    than anything the new API server keeps."""

    async def meanwhile(api: Counted, path: str) -> None:
        await api.create(path, config_map(namespace, "during"))
        await asyncio.to_thread(plane.restart_component, "kube-apiserver")
        await asyncio.wait_for(_cache_serves_watches(api, path), 120)

    return meanwhile


def test_a_version_the_restarted_api_server_no_longer_keeps_is_gone_and_the_collection_is_listed_again(
        own_plane: ControlPlane, caplog: pytest.LogCaptureFixture) -> None:
    own_plane.kubectl("create", "namespace", "reflected")
    with caplog.at_level(logging.DEBUG, logger="towline.k8s.reflector"):
        # The held watch (Gone), then one from the new list.
        seen, api = asyncio.run(_follow(own_plane, "reflected", watch_seconds=1, watches_awaited=3,
                                        meanwhile=restart_after_a_change(own_plane, "reflected")))
    gone = [record.getMessage() for record in caplog.records if "is gone; listing again" in record.getMessage()]
    assert len(gone) == 1, (api.answers, [record.getMessage() for record in caplog.records])
    # Gone came as the answer (410) or as an ERROR event of a watch answered 200; either way the next watch starts
    # from the new list's version, not the old one.
    assert api.watches[2] != api.watches[1], api.watches
    assert api.lists == 2, "one list at the start, one after the 410"
    assert seen[:2] == [(LISTED, "before"), (SYNCED, "")], seen
    relisted = seen[2:]
    assert sorted(relisted[:2]) == [(LISTED, "before"), (LISTED, "during")], seen
    assert relisted[2:] == [(SYNCED, ""), ("ADDED", "after")], seen
