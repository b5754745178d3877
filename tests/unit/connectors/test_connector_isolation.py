"""The egress isolation check: probe outcomes against real loopback sockets, and the runner's gate."""

from __future__ import annotations

import contextlib
import io
import json
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from connector_testkit import LoopbackHTTPServer, Reply

from towline_connectors.errors import ActionError
from towline_connectors.isolation import (
    NOT_ISOLATED_MESSAGE,
    IsolationReport,
    ProbeOutcome,
    ProbeTarget,
    await_isolation,
    probe_once,
)
from towline_connectors.redact import Redactor
from towline_connectors.runner import EXIT_RETRYABLE, EXIT_USAGE, RunnerSeams, run_step


class Listener:
    """A loopback TCP listener that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.payload = b""
        self.served = threading.Event()
        """Set once a connection has been read to its end (the peer closed it) or for 5 s."""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    self.payload += conn.recv(100)
            self.served.set()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()  # bound, never listened: the kernel answers a SYN with a reset
    return port


@pytest.fixture
def blackholed_port() -> Iterator[int]:
    """A listener whose accept queue is full: the kernel drops further SYNs, like a DROP rule."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    # The queue is full once the first filler's handshake has completed (it sits unaccepted in it).
    _, connected, _ = select.select([], fillers, [], 10)
    assert connected, "no filler connected: the accept queue is not full"
    yield port
    for filler in fillers:
        filler.close()
    server.close()


def test_a_listening_target_is_reachable_and_gets_no_payload(listener: Listener) -> None:
    assert probe_once(ProbeTarget("127.0.0.1", listener.port)) is ProbeOutcome.CONNECTED
    assert listener.served.wait(10), "the listener never saw the probe's connection end"
    assert listener.accepted == 1
    assert listener.payload == b"", "the probe must never send a byte"


def test_a_refused_connect_counts_as_isolated(closed_port: int) -> None:
    outcome = probe_once(ProbeTarget("127.0.0.1", closed_port))
    assert outcome is ProbeOutcome.REFUSED
    assert outcome.isolated


def test_a_dropped_syn_times_out_and_counts_as_isolated(blackholed_port: int) -> None:
    outcome = probe_once(ProbeTarget("127.0.0.1", blackholed_port), timeout=0.3)
    assert outcome is ProbeOutcome.TIMED_OUT
    assert outcome.isolated


def test_isolation_never_appearing_is_reported_after_the_budget(listener: Listener) -> None:
    report = await_isolation(ProbeTarget("127.0.0.1", listener.port), 0.5)
    assert not report.isolated
    assert report.last is ProbeOutcome.CONNECTED
    assert report.attempts >= 2, "the runner backs off and tries again within its budget"


def test_isolation_appearing_later_is_waited_for(listener: Listener) -> None:
    """The enforcer arrives after a while: the listener goes away (connects are then refused)."""
    threading.Timer(0.4, listener.close).start()
    report = await_isolation(ProbeTarget("127.0.0.1", listener.port), 5.0)
    assert report.isolated
    assert report.last is ProbeOutcome.REFUSED
    assert report.attempts >= 2


def test_an_unreadable_socket_error_never_counts_as_isolated() -> None:
    def broken(target: ProbeTarget, timeout: float) -> ProbeOutcome:
        raise OSError(99, "Cannot assign requested address")

    report = await_isolation(ProbeTarget("127.0.0.1", 9), 0.2, probe=broken)
    assert not report.isolated and report.attempts >= 2


@pytest.mark.parametrize("text", ["", "10.96.0.1", "10.96.0.1:0", "10.96.0.1:70000", "kubernetes.default:443",
                                  "10.96.0.1:https"])
def test_a_bad_probe_target_names_the_variable(text: str) -> None:
    with pytest.raises(ActionError, match="TOWLINE_ISOLATION_PROBE must be an IP address and port"):
        ProbeTarget.parse(text)


def test_ipv6_probe_targets_parse() -> None:
    assert str(ProbeTarget.parse("[fd00::1]:443")) == "[fd00::1]:443"


def _env(tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    return {
        "TOWLINE_ACTION": "http.request",
        "TOWLINE_INPUT": json.dumps({"url": url}),
        "TOWLINE_CREDENTIALS_DIR": str(tmp_path / "credentials"),
        "TOWLINE_RESULT_PATH": str(tmp_path / "termination-log"),
        "TOWLINE_DEADLINE_SECONDS": "4",
        "TOWLINE_NETWORK": json.dumps({"allowPrivateCidrs": ["127.0.0.0/8"]}),
        **extra,
    }


def _run(env: dict[str, str], seams: RunnerSeams | None = None) -> tuple[int, dict[str, Any], str]:
    log = io.StringIO()
    result = run_step(env, redactor=Redactor(), log=log, seams=seams)
    return result.exit_code, json.loads(Path(env["TOWLINE_RESULT_PATH"]).read_text()), log.getvalue()


def test_the_action_never_runs_while_the_probe_target_is_reachable(
    tmp_path: Path, http_server: LoopbackHTTPServer, listener: Listener
) -> None:
    http_server.routes["/"] = Reply(200)
    env = _env(tmp_path, http_server.url("/"), TOWLINE_ISOLATION_PROBE=f"127.0.0.1:{listener.port}")
    exit_code, document, log = _run(env)
    assert (exit_code, document["errorClass"], document["message"]) == (
        EXIT_RETRYABLE, "transient", NOT_ISOLATED_MESSAGE
    )
    assert http_server.requests == [], "the step's destination was contacted before isolation"
    assert "egress isolation not in effect" in log


def test_the_action_runs_once_the_probe_is_refused(
    tmp_path: Path, http_server: LoopbackHTTPServer, closed_port: int
) -> None:
    http_server.routes["/"] = Reply(200)
    env = _env(tmp_path, http_server.url("/"), TOWLINE_ISOLATION_PROBE=f"127.0.0.1:{closed_port}")
    exit_code, document, log = _run(env)
    assert document["ok"], document
    assert exit_code == 0
    assert len(http_server.requests) == 1
    assert "egress isolation in effect after" in log


def test_without_a_probe_target_the_action_runs_unchecked(tmp_path: Path, http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    calls: list[ProbeTarget] = []

    def never(target: ProbeTarget, budget: float) -> IsolationReport:
        calls.append(target)
        raise AssertionError("no probe configured, none expected")

    exit_code, document, _ = _run(_env(tmp_path, http_server.url("/")), RunnerSeams(await_isolation=never))
    assert (exit_code, document["ok"], calls) == (0, True, [])


def test_a_bad_probe_target_is_a_usage_error(tmp_path: Path, http_server: LoopbackHTTPServer) -> None:
    env = _env(tmp_path, http_server.url("/"), TOWLINE_ISOLATION_PROBE="kubernetes.default:443")
    exit_code, document, _ = _run(env)
    assert (exit_code, document["errorClass"]) == (EXIT_USAGE, "validation")
    assert "TOWLINE_ISOLATION_PROBE" in document["message"]
    assert http_server.requests == []


def test_the_wait_is_taken_off_the_action_budget(tmp_path: Path, http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    seen: list[float] = []

    def slow(target: ProbeTarget, budget: float) -> IsolationReport:
        seen.append(budget)
        return IsolationReport(True, 3, 0.75, ProbeOutcome.REFUSED)

    env = _env(tmp_path, http_server.url("/"), TOWLINE_ISOLATION_PROBE="127.0.0.1:9")
    _, _, log = _run(env, RunnerSeams(await_isolation=slow))
    assert seen == [1.0], "a quarter of the 4 s deadline"
    assert "budget 2.9s of a 3.2s deadline" in log
