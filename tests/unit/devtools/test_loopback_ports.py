"""`free_loopback_port` hands out ports no outgoing connection can take before the caller binds them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from towline_dev import processes


def test_a_free_port_lies_below_the_kernels_ephemeral_range_and_can_be_bound() -> None:
    low, high = (int(part) for part in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for _ in range(20):
        port = processes.free_loopback_port()
        assert not low <= port <= high, f"{port} is in the ephemeral range {low}-{high}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        monkeypatch.setattr(processes, "LOOPBACK_PORTS", range(taken, taken + 1))
        monkeypatch.setattr(processes, "_ephemeral_ports", lambda: range(0))
        # The only candidate is taken: the port comes from the kernel instead, and it is another one.
        assert processes.free_loopback_port() != taken
