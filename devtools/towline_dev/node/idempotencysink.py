"""A test host that plays a provider honouring `Idempotency-Key`: it applies each key once.

Step pods reach it at an address in the test-host network namespace (`probehosts`),
yet it runs in threads of this process and keeps what arrived in memory: its listening
socket is made inside that namespace (`netns.in_namespace`: a short-lived thread that
joined it with setns(2)), and a socket stays in the namespace it was made in, so every
other thread serves it as usual. The address must be held there (`ProbeHosts`).

`POST` (any path) with an `Idempotency-Key` header and a JSON body `{"run": ..., "step": ...}`:
the first arrival of a key is applied, a later one is a duplicate, answered 200 and not
applied again. With `lose_first_reply` the first reply of chosen keys is a 503 after applying
(a provider whose answer was lost), so the caller must retry with the same key.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from towline_dev.node.netns import in_namespace
from towline_dev.node.probehosts import NAMESPACE

IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass
class Arrival:
    key: str
    run: str
    step: str
    applied: bool
    status: int


@dataclass
class SinkCounts:
    """What the sink saw. A step's change is applied once per key, so a step whose attempts
    carried different keys is applied more than once: `steps_applied_twice` must be empty."""

    requests: int
    keys: int
    """Distinct keys, i.e. changes applied (each on its first arrival)."""
    duplicates: int
    """Arrivals of a key already applied (retries; answered, not applied again)."""
    lost_replies: int
    without_key: int
    applied_per_step: dict[tuple[str, str], int]
    arrivals_per_step: dict[tuple[str, str], int]

    @property
    def steps_applied_twice(self) -> dict[tuple[str, str], int]:
        return {step: times for step, times in self.applied_per_step.items() if times > 1}


@dataclass
class IdempotencySink:
    """Serves at `address:port` inside the test-host namespace while started."""

    address: str
    port: int = 8080
    lose_first_reply: Callable[[str], bool] = lambda key: False
    network_namespace: str | None = NAMESPACE
    """The named network namespace to listen in; None: this process's own (unit tests)."""
    arrivals: list[Arrival] = field(default_factory=list)
    _applied: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def __enter__(self) -> IdempotencySink:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> IdempotencySink:
        handler = _handler_for(self)
        def bind() -> ThreadingHTTPServer:
            return ThreadingHTTPServer((self.address, self.port), handler)

        server = in_namespace(self.network_namespace, bind) if self.network_namespace else bind()
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="idempotency-sink", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def receive(self, key: str | None, body: bytes) -> tuple[int, dict[str, Any]]:
        """Record one POST; the reply's status and JSON body."""
        try:
            document = json.loads(body or b"{}")
        except ValueError:
            document = {}
        run, step = str(document.get("run", "")), str(document.get("step", ""))
        with self._lock:
            if not key:
                self.arrivals.append(Arrival("", run, step, applied=False, status=400))
                return 400, {"error": f"the {IDEMPOTENCY_HEADER} header is missing"}
            first = key not in self._applied
            if first:
                # The effect: applied once per key, whatever arrives later.
                self._applied[key] = len(self._applied) + 1
            status = 503 if first and self.lose_first_reply(key) else 200
            self.arrivals.append(Arrival(key, run, step, applied=first, status=status))
            reply = {"applied": first, "sequence": self._applied[key]}
        return status, reply if status == 200 else {"error": "reply lost after the change was applied"}

    def counts(self) -> SinkCounts:
        with self._lock:
            arrivals = list(self.arrivals)
        applied_per_step: dict[tuple[str, str], int] = {}
        arrivals_per_step: dict[tuple[str, str], int] = {}
        for arrival in arrivals:
            step = (arrival.run, arrival.step)
            arrivals_per_step[step] = arrivals_per_step.get(step, 0) + 1
            applied_per_step[step] = applied_per_step.get(step, 0) + arrival.applied
        return SinkCounts(
            requests=len(arrivals),
            keys=sum(1 for a in arrivals if a.applied),
            duplicates=sum(1 for a in arrivals if a.key and not a.applied),
            lost_replies=sum(1 for a in arrivals if a.status == 503),
            without_key=sum(1 for a in arrivals if not a.key),
            applied_per_step=applied_per_step,
            arrivals_per_step=arrivals_per_step,
        )


def _handler_for(sink: IdempotencySink) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, reply = sink.receive(self.headers.get(IDEMPOTENCY_HEADER), self.rfile.read(length))
            payload = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler
