"""The operator's own WorkflowRun watch does what kopf's handler did (record every run, queue a pass for a run in
flight or one whose status lags its generation, forget a deleted one), resumes from the last resourceVersion,
lists again on 410 Gone, and ends the runs a re-list no longer shows. The stream test runs against a loopback HTTP
server speaking the API server's list and watch protocol."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

import pytest

from towline.k8s.client import KubeApi
from towline.k8s.connection import Connection
from towline.k8s.live import LISTED, SYNCED
from towline.k8s.objects import StepPodSettings
from towline.k8s.streams import FAILED
from towline.runtime.config import OperatorConfig
from towline.runtime.operator import Operator
from towline.runtime.runwatch import RunEvents, _listing, watch_runs

NS = "team"
Key = tuple[str, str]


def operator(connection: KubeApi | None = None) -> Operator:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    return Operator(config=config, connection=connection or KubeApi(object()))


def run(name: str, phase: str | None = "Running", *, version: str = "1", namespace: str = NS,
        generation: int = 1, observed: int | None = 1) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if phase and observed is not None:  # what kstatus_fields writes
        status["observedGeneration"] = observed
        status["conditions"] = [{"type": "Stalled", "status": "False"}]
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version, "generation": generation,
                         "creationTimestamp": "2026-12-01T08:00:00Z"},
            "spec": {"workflowRef": {"name": "nightly"}}, "status": status}


def events_of(process: Operator) -> RunEvents:
    return RunEvents(process.saw_run, process.forgot_run, process.runs.add, lambda: process.known.summaries)


def queued(process: Operator) -> set[str]:
    return {name for _, name in process.runs._queued}


def test_a_run_in_flight_is_recorded_and_queued_a_finished_one_only_recorded() -> None:
    process = operator()
    feed = events_of(process)
    feed.apply(LISTED, run("a"))
    feed.apply("ADDED", run("b", None))
    feed.apply(LISTED, run("old", "Succeeded"))
    assert queued(process) == {"a", "b"}
    assert set(process.known.summaries) == {(NS, "a"), (NS, "b"), (NS, "old")}
    assert process.run_deps.memory.latest((NS, "a")) is not None and process.run_deps.memory.latest((NS, "old")) is None


def test_a_finished_run_whose_status_lags_its_generation_gets_one_pass() -> None:
    process = operator()
    events_of(process).apply("MODIFIED", run("late-cancel", "Succeeded", generation=2, observed=1))
    assert queued(process) == {"late-cancel"}


def test_a_deleted_run_is_forgotten_and_the_runs_queued_behind_it_woken() -> None:
    process = operator()
    feed = events_of(process)
    feed.apply(LISTED, run("a"))
    feed.apply(LISTED, run("b", "Pending"))
    process.runs._queued.clear()
    feed.apply("DELETED", run("a"))
    assert (NS, "a") not in process.known.summaries
    assert queued(process) == {"b"}


def test_a_relist_ends_the_runs_it_no_longer_shows_within_its_scope_only() -> None:
    process = operator()
    feed = events_of(process)
    for body in (run("a"), run("b"), run("c", namespace="t-gw0-x"), run("d", namespace="t-gw1-y")):
        feed.apply(LISTED, body)
    feed.listed({(NS, "a")}, NS, None)
    assert set(process.known.summaries) == {(NS, "a"), ("t-gw0-x", "c"), ("t-gw1-y", "d")}
    feed.listed(set(), None, lambda namespace: namespace.startswith("t-gw0-"))
    assert set(process.known.summaries) == {(NS, "a"), ("t-gw1-y", "d")}


class ApiServer(BaseHTTPRequestHandler):
    """The runs of one namespace: a list at version 10 (runs a and b), a watch from 10 that shows a change of a and
    closes, a watch from 11 that answers 410 Gone, a list at version 20 without b (deleted meanwhile), and from
    then on watches that stay quiet."""

    requests: ClassVar[list[dict[str, str]]] = []
    lists: ClassVar[int] = 0

    def do_GET(self) -> None:
        query = dict(parse_qsl(urlsplit(self.path).query))
        ApiServer.requests.append(query)
        if query.get("watch") != "true":
            ApiServer.lists += 1
            items = [run("a", version="5"), run("b", version="6")] if ApiServer.lists == 1 else [run("a", version="11")]
            self._send(json.dumps({"metadata": {"resourceVersion": "10" if ApiServer.lists == 1 else "20"},
                                   "items": items}).encode())
        elif query.get("resourceVersion") == "10":
            self._send(json.dumps({"type": "MODIFIED", "object": run("a", "Running", version="11")}).encode() + b"\n")
        elif query.get("resourceVersion") == "11":
            self._send(json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                               "message": "too old resource version"}}).encode())
        else:
            time.sleep(0.2)
            self._send(json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}).encode())

    def _send(self, payload: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    ApiServer.requests, ApiServer.lists = [], 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ApiServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_the_stream_resumes_from_its_version_lists_again_on_410_and_forgets_what_went(server: int) -> None:
    process = operator()

    async def until_b_is_gone() -> None:
        api = KubeApi(Connection(server=f"http://127.0.0.1:{server}"))
        task = asyncio.create_task(watch_runs(api, (NS,), events_of(process)))
        try:
            for _ in range(200):  # the fact awaited, not a duration: bounded only so a failure cannot hang
                if len(ApiServer.requests) >= 5 and (NS, "b") not in process.known.summaries:
                    return
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await api.close()

    asyncio.run(until_b_is_gone())
    assert set(process.known.summaries) == {(NS, "a")}
    versions = [(q.get("watch"), q.get("resourceVersion")) for q in ApiServer.requests[:5]]
    assert versions == [(None, None), ("true", "10"), ("true", "11"), (None, None), ("true", "20")]
    assert all(q.get("limit") == "500" for q in ApiServer.requests if q.get("watch") != "true")


def test_a_failed_stream_voids_the_list_it_was_counting() -> None:
    """A list broken off after showing a run must not end the runs it had not shown yet."""
    process = operator()
    feed = events_of(process)
    feed.apply("ADDED", run("b"))
    listing = _listing(feed, NS, None)
    listing.take(LISTED, run("a"))
    listing.take(FAILED, {})
    listing.take(LISTED, run("b"))
    listing.take(SYNCED, {})
    assert set(process.known.summaries) == {(NS, "b")}, "a, shown only by the broken list, is gone; b stays"
