"""A replay leaves the letter as the ingress wrote it and adds its mark beside it; the bound counts letters, and a
letter dropped past it takes its mark along."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from towline.k8s.client import ApiError, Conflict
from towline.k8s.deliveryletters import (
    DeliveryLetter,
    keep_delivery_letter,
    letter_text,
    letters_of,
    mark_key,
    mark_replayed,
)


class OneConfigMap:
    """The API server's answers for one ConfigMap: a write naming an old resourceVersion is a 409."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] | None = None
        self.version = 0

    async def get(self, path: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.stored)

    async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if self.stored is not None:
            return copy.deepcopy(self.stored), False
        self._store(body)
        return copy.deepcopy(body), True

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.stored is not None
        if body["metadata"].get("resourceVersion") != self.stored["metadata"]["resourceVersion"]:
            raise Conflict(409, "the object has been modified")
        self._store(body)
        return copy.deepcopy(body)

    def _store(self, body: dict[str, Any]) -> None:
        self.version += 1
        self.stored = copy.deepcopy(body)
        self.stored["metadata"]["resourceVersion"] = str(self.version)


def letter(second: int) -> DeliveryLetter:
    return DeliveryLetter(namespace="shop", workflow="orders", trigger="paid", reason="Filtered",
                          failed_at=f"2026-12-07T08:00:{second:02d}Z", size=9, payload={"n": second},
                          data={"n": second})


def test_a_replay_marks_the_letter_beside_it_and_leaves_the_letter_as_written() -> None:
    async def body() -> None:
        api = OneConfigMap()
        kept = letter(1)
        await keep_delivery_letter(api, kept)  # type: ignore[arg-type]
        await mark_replayed(api, kept, "jane", "orders-paid-0d9e")  # type: ignore[arg-type]
        assert api.stored is not None
        data = api.stored["data"]
        assert data[kept.id] == letter_text(letter(1)), "the letter itself is unchanged"
        assert json.loads(data[mark_key(kept.id)]) == {"replayRun": "orders-paid-0d9e", "replayedBy": "jane"}
        assert data[mark_key(kept.id)].endswith('"replayedBy":"jane"}'), "the form the admission policy reads"
        [read] = letters_of(api.stored)
        assert (read.id, read.replayed_by, read.replay_run) == (kept.id, "jane", "orders-paid-0d9e")

    asyncio.run(body())


def test_the_bound_counts_letters_and_a_dropped_letter_takes_its_mark(monkeypatch: Any) -> None:
    monkeypatch.setattr("towline.k8s.deliveryletters.MAX_LETTERS", 2)

    async def body() -> None:
        api = OneConfigMap()
        first, second, third = letter(1), letter(2), letter(3)
        await keep_delivery_letter(api, first)  # type: ignore[arg-type]
        await keep_delivery_letter(api, second)  # type: ignore[arg-type]
        await mark_replayed(api, first, "jane", "run-1")  # type: ignore[arg-type]
        await mark_replayed(api, second, "jane", "run-2")  # type: ignore[arg-type]
        assert api.stored is not None and len(api.stored["data"]) == 4, "two letters and their marks: within 2"
        assert await keep_delivery_letter(api, third) == 2  # type: ignore[arg-type]
        assert set(api.stored["data"]) == {second.id, mark_key(second.id), third.id}
        assert [(kept.id, kept.replay_run) for kept in letters_of(api.stored)] == [(second.id, "run-2"),
                                                                                    (third.id, None)]

    asyncio.run(body())


def test_a_mark_for_a_letter_dropped_meanwhile_is_not_written() -> None:
    async def body() -> None:
        api = OneConfigMap()
        kept, other = letter(1), letter(2)
        await keep_delivery_letter(api, other)  # type: ignore[arg-type]
        await mark_replayed(api, kept, "jane", "run-1")  # type: ignore[arg-type]
        assert api.stored is not None and set(api.stored["data"]) == {other.id}

    asyncio.run(body())


def test_a_mark_the_policy_refuses_leaves_the_letter_unmarked() -> None:
    """A replay that found an earlier replay's run may not write a mark naming that earlier person (the policy
    towline-dead-letters: a mark names its writer); the letter stays as it was and the replay goes on."""

    class Refusing(OneConfigMap):
        async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            raise ApiError(403, 'configmaps "towline-dead-letters" is forbidden: ValidatingAdmissionPolicy ...')

    async def body() -> None:
        api = Refusing()
        kept = letter(1)
        await keep_delivery_letter(api, kept)  # type: ignore[arg-type]
        await mark_replayed(api, kept, "jane", "run-1")  # type: ignore[arg-type]
        assert api.stored is not None and set(api.stored["data"]) == {kept.id}

    asyncio.run(body())
