"""Test hosts for egress tests: TCP listeners in a network namespace on 198.51.100.192/27 (see layout.py).

One namespace holds every test host address on its end of a veth pair; the host
end (198.51.100.193) is its gateway and routes pod traffic to it. The cloud-metadata
address 169.254.169.254 is routed into the namespace too and held there with
nothing listening, so a probe of it never leaves the machine: unprotected, it is
answered by a reset ("connection refused"); only a NetworkPolicy makes it time out.

`TestHostNetwork` is the namespace itself (a test session makes it once); `ProbeHosts`
are listener processes with SYN counters on some of its addresses, and make the
namespace for their own lifetime when nobody else has. A test's own in-process server
binds inside it with `towline_dev.node.netns.in_namespace`.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from towline_dev.node.network import link_exists, run
from towline_dev.processes import spawn, stop_process, wait_for

NAMESPACE = "towline-testhosts"
HOST_LINK = "towline-th0"
GATEWAY = "198.51.100.193"
NAMESPACE_ADDRESS = "198.51.100.194"
METADATA_ADDRESS = "169.254.169.254"
_INSIDE = ["ip", "netns", "exec", NAMESPACE]


class TestHostNetwork:
    """The test-hosts namespace, its veth pair and routes; `add` puts more addresses on it."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        self.created = False

    @staticmethod
    def exists() -> bool:
        return Path("/run/netns", NAMESPACE).exists() and link_exists(HOST_LINK)

    @staticmethod
    def present() -> bool:
        """Any part of it: the namespace or the machine's end of its link (a half-made one too)."""
        return Path("/run/netns", NAMESPACE).exists() or link_exists(HOST_LINK)

    def start(self) -> TestHostNetwork:
        """Make the namespace unless it exists already (then it stays its maker's to remove)."""
        if self.exists():
            return self
        self.remove()  # a half-made one from a crash
        self.created = True
        run(["ip", "netns", "add", NAMESPACE])
        run(["ip", "link", "add", HOST_LINK, "type", "veth", "peer", "name", "eth0", "netns", NAMESPACE])
        run(["ip", "address", "add", f"{GATEWAY}/27", "dev", HOST_LINK])
        run(["ip", "link", "set", HOST_LINK, "up"])
        run([*_INSIDE, "ip", "link", "set", "lo", "up"])
        run([*_INSIDE, "ip", "address", "add", f"{NAMESPACE_ADDRESS}/27", "dev", "eth0"])
        run([*_INSIDE, "ip", "address", "add", f"{METADATA_ADDRESS}/32", "dev", "lo"])
        run([*_INSIDE, "ip", "link", "set", "eth0", "up"])
        run([*_INSIDE, "ip", "route", "add", "default", "via", GATEWAY])
        run(["ip", "route", "replace", f"{METADATA_ADDRESS}/32", "via", NAMESPACE_ADDRESS, "dev", HOST_LINK])
        return self

    @staticmethod
    def add(addresses: Iterable[str]) -> None:
        """Hold these test host addresses in the namespace (idempotent)."""
        for address in sorted(set(addresses) - {METADATA_ADDRESS, NAMESPACE_ADDRESS}):
            run([*_INSIDE, "ip", "address", "replace", f"{address}/27", "dev", "eth0"])

    def stop(self) -> None:
        """Remove the namespace if this object made it."""
        if self.created:
            self.remove()
            self.created = False

    @staticmethod
    def remove() -> None:
        run(["ip", "route", "delete", f"{METADATA_ADDRESS}/32", "dev", HOST_LINK], check=False)
        if link_exists(HOST_LINK):
            run(["ip", "link", "delete", HOST_LINK], check=False)
        run(["ip", "netns", "delete", NAMESPACE], check=False)


@dataclass
class ProbeHosts:
    """Listeners at `endpoints` ("address:port") inside the namespace, while started."""

    endpoints: Sequence[str]
    log_dir: Path
    server: str = "towline_dev.node.probeserver"
    """The module each endpoint runs (`python -m MODULE ADDRESS:PORT`), e.g. `towline_dev.demoapi`."""
    _servers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _network: TestHostNetwork = field(default_factory=TestHostNetwork)
    _counting: list[list[str]] = field(default_factory=list)
    _tag: str = field(default_factory=lambda: f"towline-probe-{uuid.uuid4().hex[:12]}")
    """Marks this object's counting rules: tests running at once may count the same endpoint (the metadata
    address), and identical rules would mix their counts (the first match read, the first match deleted)."""

    def __enter__(self) -> ProbeHosts:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> ProbeHosts:
        self.stop()
        self._network.start()
        self._network.add(endpoint.rsplit(":", 1)[0] for endpoint in self.endpoints)
        for endpoint in self.endpoints:
            # Counting rules (no target) per endpoint: how many TCP SYNs and UDP datagrams arrived.
            address, port = endpoint.rsplit(":", 1)
            for rule in (["-p", "tcp", "--syn", "-d", address, "--dport", port],
                         ["-p", "udp", "-d", address, "--dport", port]):
                rule += ["-m", "comment", "--comment", self._tag]
                run([*_INSIDE, "iptables", "-A", "INPUT", *rule])
                self._counting.append(rule)
        for endpoint in self.endpoints:
            if endpoint.startswith(METADATA_ADDRESS):
                continue
            log = self.log_dir / f"testhost-{endpoint.replace(':', '_')}.log"
            self._servers.append(spawn(
                [*_INSIDE, sys.executable, "-m", self.server, endpoint], log_path=log
            ))
        wait_for(self._listening, timeout=30, what="the test hosts to listen")
        return self

    def arrived(self, endpoint: str, protocol: str = "tcp") -> int:
        """TCP connection attempts (SYNs), or UDP datagrams, that reached `endpoint` so far."""
        address, port = endpoint.rsplit(":", 1)
        listing = run([*_INSIDE, "iptables", "-L", "INPUT", "-v", "-n", "-x"]).stdout
        for line in listing.splitlines():
            fields = line.split()
            if f"dpt:{port}" in fields and address in fields and protocol in fields and self._tag in fields:
                return int(fields[0])
        raise KeyError(f"no counting rule for {endpoint}")

    def _listening(self) -> bool:
        listening = run([*_INSIDE, "ss", "-Hltn"], check=False).stdout
        wanted = [e for e in self.endpoints if not e.startswith(METADATA_ADDRESS)]
        return all(f" {endpoint} " in listening.replace("\t", " ") + " " for endpoint in wanted)

    def stop(self) -> None:
        for server in self._servers:
            stop_process(server, grace_seconds=5)
        self._servers = []
        if TestHostNetwork.exists():
            for rule in self._counting:
                run([*_INSIDE, "iptables", "-D", "INPUT", *rule], check=False)
        self._counting = []
        self._network.stop()
