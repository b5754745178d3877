"""The events sink's dead-letter store: one ConfigMap, bounded, and a replay that takes each letter once."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from towline.api.events import DeadLetter
from towline.k8s.client import Conflict
from towline.k8s.deadletters import (
    REPLAY_ANNOTATION,
    ConfigMapDeadLetters,
    read_dead_letters,
    request_replay,
)


class OneConfigMap:
    """The API server's answers for one ConfigMap: a write naming an old resourceVersion is a 409."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] | None = None
        self.version = 0
        self.before_write: list[Any] = []

    async def get(self, path: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.stored)

    async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if self.stored is not None:
            return copy.deepcopy(self.stored), False
        self._store(body)
        return copy.deepcopy(self.stored), True  # type: ignore[arg-type]

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        while self.before_write:
            self.before_write.pop(0)(self)
        assert self.stored is not None
        if body["metadata"].get("resourceVersion") != self.stored["metadata"]["resourceVersion"]:
            raise Conflict(409, "the object has been modified")
        self._store(body)
        return copy.deepcopy(body)

    def _store(self, body: dict[str, Any]) -> None:
        self.version += 1
        self.stored = copy.deepcopy(body)
        self.stored["metadata"]["resourceVersion"] = str(self.version)


def letter(number: int, failed_at: str = "2026-12-07T00:00:00Z") -> DeadLetter:
    return DeadLetter(event={"id": f"e{number}", "type": "dev.towline.run.failed", "data": {"run": "r"}},
                      attempts=6, error="transient: HTTP 503", failed_at=failed_at)


def test_letters_are_kept_bounded_oldest_first_out() -> None:
    async def body() -> None:
        api = OneConfigMap()
        store = ConfigMapDeadLetters(api, "towline-system", limit=3)  # type: ignore[arg-type]
        for number in range(5):
            kept = await store.keep(letter(number, f"2026-12-07T00:00:0{number}Z"))
        assert kept == 3
        assert [kept.id for kept in await read_dead_letters(api, "towline-system")] == ["e2", "e3", "e4"]  # type: ignore[arg-type]

    asyncio.run(body())


def test_a_replay_takes_the_asked_letters_once_whichever_replica_looks_first() -> None:
    async def body() -> None:
        api = OneConfigMap()
        one = ConfigMapDeadLetters(api, "towline-system")  # type: ignore[arg-type]
        other = ConfigMapDeadLetters(api, "towline-system")  # type: ignore[arg-type]
        for number in (1, 2, 3):
            await one.keep(letter(number))
        asked = await request_replay(api, "towline-system", ["e1", "e3"])  # type: ignore[arg-type]
        assert [item.id for item in asked] == ["e1", "e3"]
        taken, kept = await other.take_replays()
        assert sorted(item.id for item in taken) == ["e1", "e3"] and kept == 1
        assert await one.take_replays() == ([], 1), "nothing is left to take: each letter is sent once"
        assert REPLAY_ANNOTATION not in api.stored["metadata"]["annotations"]  # type: ignore[index]

    asyncio.run(body())


def test_a_racing_write_makes_the_take_give_up_until_the_next_look() -> None:
    async def body() -> None:
        api = OneConfigMap()
        store = ConfigMapDeadLetters(api, "towline-system")  # type: ignore[arg-type]
        await store.keep(letter(1))
        await request_replay(api, "towline-system", None)  # type: ignore[arg-type]
        api.before_write.append(lambda server: server._store(server.stored))  # somebody wrote in between
        assert await store.take_replays() == ([], 1)
        (taken,), kept = await store.take_replays()
        assert (taken.id, kept) == ("e1", 0)

    asyncio.run(body())


def test_replaying_an_unknown_id_names_it_and_how_to_list_them() -> None:
    async def body() -> None:
        api = OneConfigMap()
        await ConfigMapDeadLetters(api, "towline-system").keep(letter(1))  # type: ignore[arg-type]
        with pytest.raises(LookupError, match=r"no dead letter 'e9'.*kubectl towline deadletters"):
            await request_replay(api, "towline-system", ["e1", "e9"])  # type: ignore[arg-type]
        assert REPLAY_ANNOTATION not in (api.stored["metadata"].get("annotations") or {})  # type: ignore[index]

    asyncio.run(body())
