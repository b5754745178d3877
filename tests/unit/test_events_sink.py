"""The operator's CloudEvents out: signed deliveries a receiver verifies and the SDK parses, bounded retries that honour
Retry-After, dead letters, a queue that never waits, and the SSRF guard in front of every connection.

The receiver is a real HTTP server on loopback; the guard sees the address the test's resolver gives for the sink's
name (a documentation address) and the test's connector dials the server, as the suite's step tests stand in for the
internet at the socket layer."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpcore
import pytest
from aiohttp import web
from tests.cloudevent_checks import received_event

from towline.api.events import DeadLetter, EventRecord
from towline.eventsink import DEAD_LETTERS, DROPPED, EventsConfig, EventSink

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
SINK = "events.example.com"
SINK_ADDRESS = "198.51.100.7"
Answer = tuple[int, dict[str, str]]


class Store:
    def __init__(self) -> None:
        self.letters: dict[str, DeadLetter] = {}
        self.asked: list[str] = []

    async def keep(self, letter: DeadLetter) -> int:
        self.letters[letter.id] = letter
        return len(self.letters)

    async def take_replays(self) -> tuple[list[DeadLetter], int]:
        taken = [self.letters.pop(key) for key in self.asked if key in self.letters]
        self.asked = []
        return taken, len(self.letters)


def record(number: int, canary: str = "") -> EventRecord:
    return EventRecord(id=f"e{number}", type="dev.towline.step.failed", source="/namespaces/ops/workflows/w",
                       subject="workflowruns/w-1/steps/load", time=datetime(2026, 12, 7, tzinfo=UTC),
                       data={"namespace": "ops", "run": "w-1", "step": "load", "errorClass": "transient" + canary})


def config(tmp_path: Path, **env: str) -> EventsConfig:
    secret = tmp_path / "signing-secret"
    secret.write_text(SECRET)
    return EventsConfig.from_environment({"TOWLINE_EVENTS_SINK_URL": f"http://{SINK}/hooks",
                                          "TOWLINE_EVENTS_SECRET_FILE": str(secret), **env})


async def with_receiver(answers: list[Answer], body: Callable[[int, list[dict[str, Any]]], Awaitable[None]]) -> None:
    """Serve `answers` in turn (the last one again), recording each request, while `body(port, requests)` runs."""
    requests: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        requests.append({"headers": dict(request.headers), "body": await request.read()})
        status, headers = answers[min(len(requests), len(answers)) - 1]
        return web.Response(status=status, headers=headers)

    app = web.Application()
    app.router.add_post("/hooks", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        await body(port, requests)
    finally:
        await runner.cleanup()


def sink_for(cfg: EventsConfig, store: Store, port: int, *, resolve: str = SINK_ADDRESS,
             refused: tuple[str, ...] = (), dialled: list[str] | None = None, slept: list[float] | None = None,
             ) -> EventSink:
    async def dial(address: str, _port: int, timeout: float | None) -> httpcore.AsyncNetworkStream:
        if dialled is not None:
            dialled.append(address)
        return await httpcore.AnyIOBackend().connect_tcp("127.0.0.1", port, timeout=timeout)

    async def sleep(seconds: float) -> None:
        if slept is not None:
            slept.append(seconds)

    return EventSink(cfg, store, refused=lambda: refused, resolver=lambda host, _port: [resolve], connector=dial,
                     sleep=sleep)


def test_an_event_arrives_signed_and_the_sdk_parses_it(tmp_path: Path) -> None:
    async def body(port: int, requests: list[dict[str, Any]]) -> None:
        sink = sink_for(config(tmp_path), Store(), port)
        assert await sink.deliver(record(1).document()) is True
        (request,) = requests
        event = received_event(SECRET, request["headers"], request["body"])
        assert (event["specversion"], event["type"], event["source"]) == (
            "1.0", "dev.towline.step.failed", "/namespaces/ops/workflows/w")
        assert event.get_data()["step"] == "load"
        assert request["headers"]["Content-Type"] == "application/cloudevents+json; charset=utf-8"
        with pytest.raises(AssertionError, match="does not verify"):
            received_event("whsec_" + base64.b64encode(b"x" * 32).decode(), request["headers"], request["body"])

    asyncio.run(with_receiver([(202, {})], body))


def test_a_failing_receiver_is_retried_with_backoff_and_retry_after_then_kept_as_a_dead_letter(tmp_path: Path) -> None:
    async def body(port: int, requests: list[dict[str, Any]]) -> None:
        store, slept = Store(), []
        sink = sink_for(config(tmp_path, TOWLINE_EVENTS_MAX_ATTEMPTS="4"), store, port, slept=slept)
        assert await sink.deliver(record(1).document()) is False
        assert len(requests) == 4
        assert slept == [1.0, 7.0, 4.0], "doubling from a second, a longer Retry-After honoured"
        (letter,) = store.letters.values()
        assert (letter.id, letter.attempts) == ("e1", 4) and "HTTP 503" in letter.error
        # While the sink fails, the next event gets one try, so an outage does not hold the queue for minutes.
        assert await sink.deliver(record(2).document()) is False
        assert len(requests) == 5 and len(store.letters) == 2

    asyncio.run(with_receiver([(503, {}), (503, {"Retry-After": "7"}), (503, {})], body))


def test_a_replayed_dead_letter_is_delivered_once_with_its_id(tmp_path: Path) -> None:
    async def body(port: int, requests: list[dict[str, Any]]) -> None:
        store = Store()
        sink = sink_for(config(tmp_path, TOWLINE_EVENTS_MAX_ATTEMPTS="1"), store, port)
        assert await sink.deliver(record(1).document()) is False
        store.asked = ["e1"]
        (letter,), _ = await store.take_replays()
        assert await sink.deliver(letter.event) is True
        assert store.letters == {} and len(requests) == 2
        assert received_event(SECRET, requests[1]["headers"], requests[1]["body"])["id"] == "e1"

    asyncio.run(with_receiver([(500, {}), (200, {})], body))


def test_a_client_error_is_not_retried(tmp_path: Path) -> None:
    async def body(port: int, requests: list[dict[str, Any]]) -> None:
        store = Store()
        assert await sink_for(config(tmp_path), store, port).deliver(record(1).document()) is False
        assert len(requests) == 1 and "HTTP 400" in store.letters["e1"].error

    asyncio.run(with_receiver([(400, {})], body))


@pytest.mark.parametrize(("resolved", "refused", "why"), [
    ("127.0.0.1", (), "loopback address"),
    ("169.254.169.254", (), "cloud metadata address"),
    (SINK_ADDRESS, (f"{SINK_ADDRESS}/32",), "the Kubernetes API server's address"),
])
def test_a_sink_name_resolving_to_a_refused_address_is_never_contacted(
        tmp_path: Path, resolved: str, refused: tuple[str, ...], why: str) -> None:
    async def body(port: int, requests: list[dict[str, Any]]) -> None:
        store, dialled = Store(), []
        cfg = config(tmp_path, TOWLINE_EVENTS_ALLOW_PRIVATE_CIDRS="198.51.100.0/24")
        sink = sink_for(cfg, store, port, resolve=resolved, refused=refused, dialled=dialled)
        assert await sink.deliver(record(1).document()) is False
        assert dialled == [] and requests == []
        letter = store.letters["e1"]
        assert why in letter.error and letter.attempts == 1, "a refusal is final: no retry"

    asyncio.run(with_receiver([(200, {})], body))


def test_the_api_server_stays_refused_until_its_addresses_are_known(tmp_path: Path) -> None:
    def unknown() -> tuple[str, ...]:
        raise RuntimeError("not read yet")

    async def body(port: int, requests: list[dict[str, Any]]) -> None:
        store = Store()
        sink = EventSink(config(tmp_path, TOWLINE_EVENTS_MAX_ATTEMPTS="2"), store, refused=unknown,
                         resolver=lambda host, _port: [SINK_ADDRESS], sleep=lambda _s: asyncio.sleep(0))
        assert await sink.deliver(record(1).document()) is False
        assert requests == [] and "not known yet" in store.letters["e1"].error

    asyncio.run(with_receiver([(200, {})], body))


def test_emit_never_waits_a_full_queue_drops_and_counts(tmp_path: Path) -> None:
    async def body() -> None:
        sink = EventSink(config(tmp_path, TOWLINE_EVENTS_QUEUE_SIZE="2"), Store(), refused=tuple)
        before = DROPPED.labels("queue_full")._value.get()
        sink.emit([record(1), record(2), record(3)])
        assert DROPPED.labels("queue_full")._value.get() == before + 1
        assert sink.unsent() == 2

    asyncio.run(body())


def test_only_the_chosen_types_are_queued(tmp_path: Path) -> None:
    async def body() -> None:
        sink = EventSink(config(tmp_path, TOWLINE_EVENTS_TYPES="dev.towline.run.*,dev.towline.approval.decided"),
                         Store(), refused=tuple)
        run = EventRecord(id="r", type="dev.towline.run.failed", source="/s", subject="x", time=datetime.now(UTC))
        sink.emit([record(1), run])
        assert sink.unsent() == 1

    asyncio.run(body())


@pytest.mark.parametrize(("env", "named"), [
    ({"TOWLINE_EVENTS_SINK_URL": "ftp://events.example.com"}, "events.sink.url"),
    ({"TOWLINE_EVENTS_SINK_URL": "https://user:pw@events.example.com"}, "events.sink.url"),
    ({"TOWLINE_EVENTS_SINK_URL": "http://169.254.169.254/latest"}, "events.sink.url"),
    ({"TOWLINE_EVENTS_SINK_URL": "https://events.example.com"}, "events.sink.secretRef"),
    ({"TOWLINE_EVENTS_TYPES": "dev.towline.build.*"}, "events.sink.types"),
    ({"TOWLINE_EVENTS_ALLOW_PRIVATE_CIDRS": "10.0.0.0/4"}, "events.sink.allowPrivateCidrs"),
    ({"TOWLINE_EVENTS_ALLOW_PRIVATE_CIDRS": "127.0.0.1/32"}, "events.sink.allowPrivateCidrs"),
    ({"TOWLINE_EVENTS_MAX_ATTEMPTS": "0"}, "events.sink.maxAttempts"),
])
def test_bad_settings_name_the_chart_value(tmp_path: Path, env: dict[str, str], named: str) -> None:
    base = {"TOWLINE_EVENTS_SINK_URL": "https://events.example.com", "TOWLINE_EVENTS_SECRET_FILE": "/s"}
    if named == "events.sink.secretRef":
        base.pop("TOWLINE_EVENTS_SECRET_FILE")
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        EventsConfig.from_environment({**base, **env})


def test_no_sink_url_means_no_events() -> None:
    assert EventsConfig.from_environment({}).url is None


def test_asked_replays_go_back_to_the_queue_and_the_gauge_follows_the_store(tmp_path: Path) -> None:
    async def body() -> None:
        store = Store()
        for number in (1, 2):
            letter = DeadLetter(event=record(number).document(), attempts=3, error="transient: HTTP 503",
                                failed_at="2026-12-07T00:00:00Z")
            store.letters[letter.id] = letter
        store.asked = ["e1"]
        looks: list[float] = []

        async def sleep(seconds: float) -> None:
            looks.append(seconds)
            if len(looks) > 1:
                raise asyncio.CancelledError

        sink = EventSink(config(tmp_path), store, refused=tuple, sleep=sleep)
        with pytest.raises(asyncio.CancelledError):
            await sink.replays(5.0)
        assert looks == [5.0, 5.0] and list(store.letters) == ["e2"]
        assert DEAD_LETTERS._value.get() == 1
        assert sink.unsent() == 1

    asyncio.run(body())
