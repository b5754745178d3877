"""Towline's CloudEvents out, on the real API server and node: a receiver in the test hosts' network takes the events
of a run with a retried step and an approval, each signed (checked with the ingress's Standard Webhooks verifier) and
parsed by the CloudEvents SDK, and no byte of them is a Secret's value or a param's; a receiver that is down leaves
dead letters that `kubectl towline deadletters replay` delivers once; a sink whose name resolves to loopback or that
is the API server itself is refused and never contacted.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.cloudevent_checks import received_event
from tests.integration.eventsinksupport import operator_with_sink
from tests.integration.ingress_support import create_secret, new_whsec
from tests.integration.pluginsupport import ok, towline
from tests.integration.support import (
    ScriptedServer,
    apply,
    awaiting_approval,
    decide,
    get,
    start_run,
    wait_for,
    wait_for_phase,
    workflow,
)

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OPERATOR_NAMESPACE, OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

CANARY_SECRET = "canary-secret-e51a77c0"
CANARY_PARAM = "canary-param-3b8d12"


def dead_letters(cluster: ControlPlane) -> list[dict[str, Any]]:
    listed = ok(towline(cluster, OPERATOR_NAMESPACE, "deadletters", "-o", "json", user="admin"))
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items


def events_of(requests: list[dict[str, Any]], secret: str, run: str) -> list[Any]:
    """Each request checked (signature, SDK parse); the events of `run`, in the order they came."""
    events = [received_event(secret, request["headers"], request["body"].encode()) for request in requests]
    return [event for event in events if event.get_data()["run"] == run]


def test_a_run_with_a_retry_and_an_approval_reaches_the_sink_signed_parsed_and_without_values(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, tmp_path: Path,
) -> None:
    cluster, ns, secret = towline_installed, team_namespace, new_whsec()
    create_secret(cluster, ns, "canary", {"token": CANARY_SECRET})
    with ScriptedServer() as servers:
        servers.script("/status", (503, {"error": "warming up"}, {}), (200, {"version": "1.4.2"}, {}))
        release = servers.script("/release", (201, {"released": True}, {}))
        sink = servers.script("/events", (202, b"", {}))
        manifest = workflow(ns, "announced", [
            {"id": "check", "action": "http.request", "with": {"url": f"{servers.url}/status"},
             "retry": {"limit": 2, "backoff": "fixed", "baseDelaySeconds": 1}},
            {"id": "review", "needs": ["check"], "approval": {"approvers": {"users": ["bob"]}}},
            {"id": "release", "needs": ["review"], "action": "http.request", "credentials": {"api": "canary"},
             "with": {"url": f"{servers.url}/release", "method": "POST", "json": {"note": "${{ params.note }}"},
                      "auth": {"bearer": {"credential": "api", "key": "token"}}}},
        ])
        manifest["spec"]["params"] = [{"name": "note", "type": "string", "default": CANARY_PARAM}]
        apply(cluster, manifest)
        with operator_with_sink(towline_operator, tmp_path, f"{servers.url}/events", secret):
            run = start_run(cluster, ns, "announced")
            assert decide(cluster, ns, awaiting_approval(cluster, ns, run), "bob").returncode == 0
            done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
            assert done["status"]["phase"] == "Succeeded", done["status"]
            # The operator announces every run it watches (other tests' too): this run's end is the one to wait for.
            wait_for("the run's last event at the sink", lambda: any(
                event["type"] == "dev.towline.run.succeeded" for event in events_of(sink.requests, secret, run)))
        events = events_of(sink.requests, secret, run)
        types = [event["type"] for event in events]
        check = [(event["type"], event.get_data()["attempt"]) for event in events
                 if event.get_data().get("step") == "check" and event["type"].startswith("dev.towline.step.")]
        assert check == [("dev.towline.step.running", 1), ("dev.towline.step.retrying", 1),
                         ("dev.towline.step.running", 2), ("dev.towline.step.succeeded", 2)]
        assert types.index("dev.towline.approval.requested") < types.index("dev.towline.approval.decided")
        decided = next(event for event in events if event["type"] == "dev.towline.approval.decided")
        assert decided.get_data()["decidedBy"] == "bob"
        assert types[-1] == "dev.towline.run.succeeded"
        assert {event["source"] for event in events} == {f"/namespaces/{ns}/workflows/announced"}
        assert len({event["id"] for event in events}) == len(events), "one event per transition"
        # The release step did send both canaries; not one byte of either reached the sink.
        assert release.requests[0]["headers"]["Authorization"] == f"Bearer {CANARY_SECRET}"
        assert CANARY_PARAM in release.requests[0]["body"]
        for request in sink.requests:
            assert CANARY_SECRET not in request["body"] + json.dumps(request["headers"])
            assert CANARY_PARAM not in request["body"]


def test_a_receiver_that_is_down_leaves_dead_letters_and_a_replay_delivers_each_once(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, tmp_path: Path,
) -> None:
    cluster, ns, secret = towline_installed, team_namespace, new_whsec()
    with ScriptedServer() as servers:
        servers.script("/ping", (200, {"ok": True}, {}))
        down = servers.script("/events", (503, {"error": "down"}, {"Retry-After": "1"}))
        apply(cluster, workflow(ns, "unheard", [
            {"id": "ping", "action": "http.request", "with": {"url": f"{servers.url}/ping"}}]))
        with operator_with_sink(towline_operator, tmp_path, f"{servers.url}/events", secret):
            run = start_run(cluster, ns, "unheard")
            assert wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"

            def letters_of_the_run() -> list[dict[str, Any]] | None:
                letters = [letter for letter in dead_letters(cluster) if letter["event"]["data"]["run"] == run]
                done = any(letter["event"]["type"] == "dev.towline.run.succeeded" for letter in letters)
                return letters if done else None

            letters = wait_for("the run's events kept as dead letters", letters_of_the_run, timeout=120)
            first = down.requests[0]["headers"]["webhook-id"]
            assert [request["headers"]["webhook-id"] for request in down.requests[:3]] == [first] * 3
            attempts = {letter["id"]: letter["attempts"] for letter in letters}
            assert attempts.pop(first) == 3, "the first event was tried three times"
            assert set(attempts.values()) == {1}, "after it, while the sink fails, one try each"
            assert all("HTTP 503" in letter["error"] for letter in letters)
            kept = {letter["id"] for letter in letters}
            assert len(down.requests) == len(kept) + 2

            # A team member can neither read nor replay them; the installation's admin can.
            refused = towline(cluster, OPERATOR_NAMESPACE, "deadletters", "replay", "--all", user="carol")
            assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
            up = servers.script("/events", (200, b"", {}))
            assert f"{len(kept)} dead letter(s)" in ok(towline(cluster, OPERATOR_NAMESPACE, "deadletters", "replay",
                                                              "--all", user="admin"))
            wait_for("every dead letter delivered", lambda: {
                request["headers"]["webhook-id"] for request in up.requests} >= kept, timeout=60)
            wait_for("the dead letters gone", lambda: dead_letters(cluster) == [])
            again = ok(towline(cluster, OPERATOR_NAMESPACE, "deadletters", "replay", "--all", user="admin"))
            assert again == ""
        received = Counter(request["headers"]["webhook-id"] for request in up.requests)
        assert set(received) == kept and set(received.values()) == {1}, "each replayed once, with its own id"
        for event in events_of(up.requests, secret, run):
            assert event["id"] in kept


class LoopbackReceiver:
    """An HTTP server on this machine's loopback, counting what reaches it."""

    def __init__(self) -> None:
        self.hits = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                receiver.hits += 1
                self.send_response(200)
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def api_server_address(cluster: ControlPlane) -> tuple[str, int]:
    slice_ = get(cluster, "endpointslices.discovery.k8s.io", "kubernetes", "default")
    assert slice_ is not None
    return slice_["endpoints"][0]["addresses"][0], int(slice_["ports"][0]["port"])


@pytest.mark.parametrize("target", ["a name resolving to loopback", "the API server"])
def test_a_sink_at_a_refused_address_is_never_contacted(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, tmp_path: Path,
    target: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    receiver = LoopbackReceiver()
    if target == "the API server":
        address, port = api_server_address(cluster)
        # Even opted into its range, the API server stays refused (its own address, whatever the opt-in).
        url, settings, why = f"https://{address}:{port}/apis", {
            "TOWLINE_EVENTS_ALLOW_PRIVATE_CIDRS": f"{address}/32"}, "the Kubernetes API server's address"
    else:
        url, settings, why = f"http://localhost:{receiver.port}/events", {}, "loopback address"
    try:
        with ScriptedServer() as servers:
            servers.script("/ping", (200, {"ok": True}, {}))
            apply(cluster, workflow(ns, "misdirected", [
                {"id": "ping", "action": "http.request", "with": {"url": f"{servers.url}/ping"}}]))
            with operator_with_sink(towline_operator, tmp_path, url, new_whsec(), **settings):
                run = start_run(cluster, ns, "misdirected")
                assert wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
                letters = wait_for("the run's last event refused", lambda: [
                    letter for letter in dead_letters(cluster) if letter["event"]["data"]["run"] == run
                    and letter["event"]["type"] == "dev.towline.run.succeeded"], timeout=60)
        assert why in letters[0]["error"] and letters[0]["attempts"] == 1, letters[0]
        assert receiver.hits == 0
    finally:
        receiver.close()
