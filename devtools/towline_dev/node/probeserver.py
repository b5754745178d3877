"""A TCP listener for egress tests: answers every connection with one line naming itself.

Run inside a test host's network namespace: ``python -m towline_dev.node.probeserver ADDRESS:PORT``.
"""

from __future__ import annotations

import socketserver
import sys


class _Greeter(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(f"towline-test-host {self.server.server_address!r}\n".encode())


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main(argv: list[str]) -> int:
    if len(argv) != 1 or ":" not in argv[0]:
        print("usage: python -m towline_dev.node.probeserver ADDRESS:PORT", file=sys.stderr)
        return 2
    address, port = argv[0].rsplit(":", 1)
    with _Server((address, int(port)), _Greeter) as server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
