"""The tests' trace collector: Jaeger's all-in-one as a process in the test hosts' network namespace.

`TraceCollector(log_dir).start()` serves OTLP/HTTP at `OTLP_TRACES_URL` (where the operator and the ingress
export, and a step pod could) and Jaeger's query API at `QUERY_URL`; spans are kept in memory, so a stop forgets
them. `trace(trace_id)` reads one trace back as Jaeger stores it.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from towline_dev.jaeger import find_jaeger
from towline_dev.node.probehosts import NAMESPACE, TestHostNetwork
from towline_dev.processes import spawn, stop_process, wait_for

COLLECTOR_ADDRESS = "198.51.100.214"
"""A test host address (198.51.100.192/27) of its own: Jaeger's every listener binds here."""
OTLP_TRACES_URL = f"http://{COLLECTOR_ADDRESS}:4318/v1/traces"
QUERY_URL = f"http://{COLLECTOR_ADDRESS}:16686"
_PORTS = {
    "--collector.otlp.http.host-port": 4318, "--collector.otlp.grpc.host-port": 4317,
    "--collector.http-server.host-port": 14268, "--collector.grpc-server.host-port": 14250,
    "--query.http-server.host-port": 16686, "--query.grpc-server.host-port": 16685,
    "--admin.http.host-port": 14269,
}


@dataclass
class TraceCollector:
    log_dir: Path
    _process: subprocess.Popen[bytes] | None = None
    _network: TestHostNetwork = field(default_factory=TestHostNetwork)

    def start(self) -> TraceCollector:
        jaeger = find_jaeger()
        self.stop()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._network.start()
        self._network.add([COLLECTOR_ADDRESS])
        flags = [f"{flag}={COLLECTOR_ADDRESS}:{port}" for flag, port in _PORTS.items()]
        self._process = spawn(["ip", "netns", "exec", NAMESPACE, str(jaeger), *flags, "--memory.max-traces=10000"],
                              log_path=self.log_dir / "jaeger.log", env={**os.environ, "SPAN_STORAGE_TYPE": "memory"})
        wait_for(self._ready, timeout=60, interval=0.2, what=f"Jaeger's query API at {QUERY_URL}")
        return self

    def _ready(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            raise RuntimeError(f"Jaeger exited ({self._process.returncode}); see {self.log_dir / 'jaeger.log'}")
        try:
            with urllib.request.urlopen(f"{QUERY_URL}/api/services", timeout=2) as answer:  # noqa: S310 - test host
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The trace (`data[0]` of Jaeger's answer: spans and processes), or None while Jaeger has none."""
        try:
            with urllib.request.urlopen(f"{QUERY_URL}/api/traces/{trace_id}", timeout=5) as answer:  # noqa: S310
                data = json.loads(answer.read()).get("data") or []
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise
        return data[0] if data else None

    def raw_trace(self, trace_id: str) -> bytes:
        """The whole trace as Jaeger answers it, every byte (what a canary is searched for in)."""
        with urllib.request.urlopen(f"{QUERY_URL}/api/traces/{trace_id}", timeout=5) as answer:  # noqa: S310
            return bytes(answer.read())

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process, grace_seconds=5)
            self._process = None
        self._network.stop()
