"""The one list+watch (towline.k8s.reflector) without a cluster: its backoff, and what it does when a watch breaks,
an API server refuses, or a list keeps failing. Against the real API server:
tests/integration/test_reflector_on_the_api_server.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from towline.jsontypes import JSON
from towline.k8s.client import CONFIG_MAPS, ApiError, ApiUnavailable
from towline.k8s.reflector import FAILED, LISTED, SYNCED, Backoff, reflect
from towline.k8s.streams import follow


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_backoff_doubles_from_its_first_wait_up_to_its_cap() -> None:
    clock = Clock()
    backoff = Backoff(initial=0.5, cap=4.0, reset_after=120.0, clock=clock, random=lambda: 0.999999)
    waits = []
    for _ in range(6):
        waits.append(round(backoff.next(), 3))
        clock.now += 1.0
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_the_jitter_keeps_each_wait_between_half_its_base_and_the_base() -> None:
    lowest = Backoff(initial=2.0, cap=8.0, clock=Clock(), random=lambda: 0.0)
    assert [lowest.next() for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]


def test_a_stream_healthy_for_the_reset_period_starts_from_the_first_wait_again() -> None:
    clock = Clock()
    backoff = Backoff(initial=0.5, cap=30.0, reset_after=120.0, clock=clock, random=lambda: 0.999999)
    for _ in range(5):
        backoff.next()
        clock.now += 10.0
    assert round(backoff.next(), 3) == 16.0, "failures 10 s apart keep growing the wait"
    clock.now += 119.0
    assert round(backoff.next(), 3) == 30.0, "not yet healthy long enough"
    clock.now += 120.0
    assert round(backoff.next(), 3) == 0.5


class Recorded(Backoff):
    """A backoff of microseconds that notes each wait it gave."""

    def __init__(self) -> None:
        super().__init__(initial=0.0001, cap=0.0016, random=lambda: 0.999999)
        self.waits: list[float] = []

    def next(self) -> float:
        wait = super().next()
        self.waits.append(round(wait, 6))
        return wait


class Body:
    def __init__(self, chunks: list[bytes], then: BaseException | None) -> None:
        self.chunks, self.then = chunks, then

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.then is not None:
            raise self.then
        await asyncio.Event().wait()  # an open watch with nothing more to say


class Response:
    def __init__(self, status: int, chunks: list[bytes], then: BaseException | None = None) -> None:
        self.status, self.content = status, Body(chunks, then)

    async def read(self) -> bytes:
        return b"".join(self.content.chunks)

    def release(self) -> None:
        pass


def event(kind: str, name: str, version: str) -> bytes:
    body = {"type": kind, "object": {"metadata": {"name": name, "resourceVersion": version}}}
    return json.dumps(body).encode() + b"\n"


class FakeApi:
    """Lists answer `lists` in turn (an exception is raised); watches answer `watches` in turn."""

    def __init__(self, lists: list[JSON | Exception], watches: list[Response]) -> None:
        self.lists, self.watches = lists, watches
        self.listed: list[dict[str, str]] = []
        self.watched: list[dict[str, str]] = []

    async def request(self, method: str, path: str, *, query: dict[str, str]) -> JSON:
        self.listed.append(dict(query))
        answer = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def send(self, method: str, path: str, *, query: dict[str, str], accept: str, timeout: Any) -> Response:
        self.watched.append(dict(query))
        return self.watches.pop(0)


def listing(version: str, *names: str) -> JSON:
    return {"metadata": {"resourceVersion": version}, "items": [{"metadata": {"name": n}} for n in names]}


async def first(stream: Any, count: int) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    async for kind, body in stream:
        seen.append((kind, str((body.get("metadata") or {}).get("name", ""))))
        if len(seen) == count:
            break
    await stream.aclose()
    return seen


def test_a_connection_broken_mid_watch_is_opened_again_from_its_version_without_a_list() -> None:
    api = FakeApi([listing("10", "a")], [
        Response(200, [event("ADDED", "b", "11")], then=aiohttp.ClientPayloadError("connection reset")),
        Response(200, [event("MODIFIED", "b", "12")]),
    ])
    backoff = Recorded()
    seen = asyncio.run(first(reflect(api, "/api/v1/configmaps", backoff=backoff), 4))  # type: ignore[arg-type]
    assert seen == [(LISTED, "a"), (SYNCED, ""), ("ADDED", "b"), ("MODIFIED", "b")]
    assert len(api.listed) == 1
    assert [query["resourceVersion"] for query in api.watched] == ["10", "11"]
    assert len(backoff.waits) == 1, "a broken connection waits one backoff before the watch opens again"


def test_a_persistent_stream_whose_list_keeps_failing_waits_longer_each_time_and_says_so() -> None:
    unavailable = ApiUnavailable(ConnectionRefusedError("refused"))
    api = FakeApi([unavailable, unavailable, unavailable, unavailable, unavailable, listing("10", "a")], [
        Response(200, [])])
    backoff = Recorded()
    seen = asyncio.run(first(reflect(api, "/api/v1/configmaps", backoff=backoff), 7))  # type: ignore[arg-type]
    assert seen == [(FAILED, "")] * 5 + [(LISTED, "a"), (SYNCED, "")]
    assert backoff.waits == [0.0001, 0.0002, 0.0004, 0.0008, 0.0016]


def test_a_refused_watch_lists_again_but_a_refused_persons_stream_ends_with_the_refusal() -> None:
    forbidden = Response(403, [json.dumps({"message": "configmaps is forbidden"}).encode()])
    api = FakeApi([listing("10", "a"), listing("20", "a")], [forbidden, Response(200, [])])
    seen = asyncio.run(first(reflect(api, "/api/v1/configmaps", backoff=Recorded()), 5))  # type: ignore[arg-type]
    assert seen == [(LISTED, "a"), (SYNCED, ""), (FAILED, ""), (LISTED, "a"), (SYNCED, "")]

    person = FakeApi([listing("10", "a")], [Response(403, [json.dumps({"message": "forbidden"}).encode()])])
    with pytest.raises(ApiError, match="403"):
        asyncio.run(first(reflect(person, "/api/v1/configmaps", persistent=False, backoff=Recorded()), 5))  # type: ignore[arg-type]


def test_a_410_as_a_watch_event_lists_again() -> None:
    gone = json.dumps({"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}).encode()
    api = FakeApi([listing("10", "a"), listing("30", "a", "b")], [Response(200, [gone + b"\n"]), Response(200, [])])
    seen = asyncio.run(first(reflect(api, "/api/v1/configmaps", backoff=Recorded()), 5))  # type: ignore[arg-type]
    assert seen == [(LISTED, "a"), (SYNCED, ""), (LISTED, "a"), (LISTED, "b"), (SYNCED, "")]
    assert len(api.listed) == 2 and api.watched[0]["resourceVersion"] == "10"


def test_a_followed_stream_hands_on_no_managed_fields() -> None:
    """What the processes' stores keep (towline.k8s.streams.follow) is the object without its managedFields: a
    step pod's are a large part of its bytes, and nothing reads them from a store."""
    managed = [{"manager": "towline", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    listed: JSON = {"metadata": {"resourceVersion": "10"}, "items": [
        {"metadata": {"name": "a", "labels": {"x": "y"}, "managedFields": managed}}]}
    watched = {"type": "ADDED", "object": {"metadata": {"name": "b", "resourceVersion": "11",
                                                        "managedFields": managed}}}
    api = FakeApi([listed], [Response(200, [json.dumps(watched).encode() + b"\n"])])
    received: list[tuple[str, JSON]] = []
    done = asyncio.Event()

    def sink(event: str, body: JSON) -> None:
        received.append((event, body))
        if event == "ADDED":
            done.set()

    async def main() -> None:
        task = asyncio.create_task(follow(api, CONFIG_MAPS, None, sink, what="config maps",  # type: ignore[arg-type]
                                          backoff=Recorded()))
        await asyncio.wait_for(done.wait(), 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [(event, body.get("metadata")) for event, body in received] == [
        (LISTED, {"name": "a", "labels": {"x": "y"}}), (SYNCED, None),
        ("ADDED", {"name": "b", "resourceVersion": "11"})]
