"""The chaos scenario's sink applies a step's change once per Idempotency-Key, over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from towline_dev.node.idempotencysink import IdempotencySink
from towline_dev.processes import free_loopback_port


@pytest.fixture
def sink() -> Iterator[IdempotencySink]:
    with IdempotencySink("127.0.0.1", free_loopback_port(), network_namespace=None,
                         lose_first_reply=lambda key: key.startswith("lost")) as started:
        yield started


def post(sink: IdempotencySink, key: str | None, run: str = "r1", step: str = "first") -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return httpx.post(f"{sink.url}/apply", headers=headers, content=json.dumps({"run": run, "step": step}))


def test_a_repeated_key_is_answered_but_applied_once(sink: IdempotencySink) -> None:
    first, again = post(sink, "k1"), post(sink, "k1")
    assert (first.status_code, first.json()["applied"]) == (200, True)
    assert (again.status_code, again.json()["applied"]) == (200, False)
    counts = sink.counts()
    assert (counts.requests, counts.keys, counts.duplicates) == (2, 1, 1)
    assert counts.applied_per_step == {("r1", "first"): 1} and not counts.steps_applied_twice


def test_a_lost_reply_is_a_503_after_applying_and_the_retry_is_a_duplicate(sink: IdempotencySink) -> None:
    assert post(sink, "lost-1").status_code == 503
    retried = post(sink, "lost-1")
    assert (retried.status_code, retried.json()["applied"]) == (200, False)
    counts = sink.counts()
    assert (counts.keys, counts.duplicates, counts.lost_replies) == (1, 1, 1)


def test_a_step_retried_under_a_new_key_counts_as_applied_twice(sink: IdempotencySink) -> None:
    post(sink, "k1", step="second")
    post(sink, "k2", step="second")
    assert sink.counts().steps_applied_twice == {("r1", "second"): 2}


def test_a_request_without_a_key_is_refused_and_counted(sink: IdempotencySink) -> None:
    assert post(sink, None).status_code == 400
    counts = sink.counts()
    assert (counts.without_key, counts.keys) == (1, 0)
