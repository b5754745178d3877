"""The demo API `make dev`'s workflow calls: a pretend deployment service.

`GET /status` reports a version, `POST /deploy` accepts one. `make dev` runs it
inside the test-host network namespace (`towline_dev.node.probehosts`) on a
documentation address, so step pods reach it only through their NetworkPolicy:
``python -m towline_dev.demoapi ADDRESS:PORT``.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class DemoApi(BaseHTTPRequestHandler):
    """Answers every GET with the service's status and every POST with what it deployed."""

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, {"service": "checkout", "version": "2.4.1", "healthy": True})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": "the body is not JSON"})
            return
        self._send(202, {"deployed": body.get("version"), "idempotencyKey": self.headers.get("Idempotency-Key")})


def main(argv: list[str]) -> int:
    if len(argv) != 1 or ":" not in argv[0]:
        print("usage: python -m towline_dev.demoapi ADDRESS:PORT", file=sys.stderr)
        return 2
    address, port = argv[0].rsplit(":", 1)
    with ThreadingHTTPServer((address, int(port)), DemoApi) as server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
