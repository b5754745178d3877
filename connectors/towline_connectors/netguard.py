"""Decide whether a step may talk to a host: the SSRF guard.

A name is resolved exactly once, every address it resolves to is checked, and
the caller connects to one of those checked addresses, so a second DNS answer
can never redirect the connection (no DNS rebinding). Loopback, private,
link-local, CGNAT, multicast, reserved and cloud-metadata destinations are
refused unless the step explicitly opted into a private range; metadata
endpoints are refused even then.

This module must never hand an unvalidated name to a resolver that could read
it as a number (`2130706433`, `0x7f.1`, `127.1`) and never connect anywhere
itself.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]


class DestinationRefusedError(Exception):
    """The guard refused a host or address; the message says why and how to allow it."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"refused to connect to {host}: {reason}")
        self.host = host
        self.reason = reason


class ResolutionError(Exception):
    """DNS gave no usable answer. `temporary` mirrors EAI_AGAIN-style failures."""

    def __init__(self, host: str, detail: str, *, temporary: bool) -> None:
        super().__init__(f"could not resolve {host}: {detail}")
        self.host = host
        self.temporary = temporary


def _nets(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(cidr) for cidr in cidrs)


# Cloud metadata services hand out instance credentials; no opt-in reaches them.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.253",  # AWS VPC DNS
        "169.254.169.123",  # AWS time sync
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "168.63.129.16",  # Azure WireServer (host agent; public space, so no range below covers it)
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS VPC DNS over IPv6
    )
)
METADATA_HOSTNAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)

# Like the metadata addresses, never reachable whatever a step opts into. RFC 8215 local-use
# NAT64 is translated by a gateway inside this network, so the IPv4 address it embeds says
# nothing about where the packet really goes (169.254.169.254 behind it, for one).
NEVER_OPENED_NETWORKS: tuple[tuple[IPNetwork, str], ...] = (
    *((net, "NAT64 local-use address (64:ff9b:1::/48)") for net in _nets("64:ff9b:1::/48")),
)
MIN_OPT_IN_PREFIX = {4: 8, 6: 7}
"""The broadest private range a step may opt into per IP version: 10.0.0.0/8, fc00::/7."""

# Labelled so a refusal says what the address is. Documentation ranges
# (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) are
# deliberately absent: they are never assigned to infrastructure, and examples
# and tests use them as stand-ins for public addresses.
BLOCKED_NETWORKS: tuple[tuple[IPNetwork, str], ...] = (
    *((net, "loopback address") for net in _nets("127.0.0.0/8", "::1/128")),
    *((net, "unspecified / this-host address") for net in _nets("0.0.0.0/8", "::/128")),
    *((net, "private address") for net in _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")),
    *((net, "unique-local address") for net in _nets("fc00::/7")),
    *((net, "carrier-grade NAT address (100.64.0.0/10)") for net in _nets("100.64.0.0/10")),
    *((net, "link-local address") for net in _nets("169.254.0.0/16", "fe80::/10")),
    *((net, "site-local address") for net in _nets("fec0::/10")),
    *((net, "multicast address") for net in _nets("224.0.0.0/4", "ff00::/8")),
    *((net, "benchmarking address") for net in _nets("198.18.0.0/15")),
    *((net, "IETF protocol assignment") for net in _nets("192.0.0.0/24", "2001::/23")),
    *NEVER_OPENED_NETWORKS,
    *((net, "reserved address") for net in _nets("240.0.0.0/4", "::/8", "100::/64", "192.88.99.0/24")),
)
_DOCUMENTATION = _nets("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64 = (NAT64_WELL_KNOWN,)

# WHATWG URL: a host whose last label is a number is an IPv4 address in some
# notation, never a name.
_NUMERIC_LABEL = re.compile(r"^(?:[0-9]+|0[xX][0-9a-fA-F]*)$")
_IPV4_NUMBER_CHARS = re.compile(r"^[0-9a-fA-FxX.]+$")


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address really reaches (mapped, NAT64, 6to4)."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def _within(address: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


def never_opened_reason(address: IPAddress) -> str | None:
    """Why no opt-in ever opens `address` (a metadata address, local-use NAT64), or None."""
    if address in METADATA_ADDRESSES:
        return "cloud metadata address"
    for net, label in NEVER_OPENED_NETWORKS:
        if address.version == net.version and address in net:
            return label
    return None


def opt_in_problem(network: IPNetwork) -> str | None:
    """Why a step may not opt into `network` (too broad, or never opened), or None; names the fix."""
    shortest = MIN_OPT_IN_PREFIX[network.version]
    if network.prefixlen < shortest:
        return (f"{network} is too broad to opt into (prefixes shorter than /{shortest} for IPv{network.version} "
                "are refused); name the private range the step needs, e.g. 10.20.0.0/16 or fd12:3456:789a::/48")
    for net, _label in NEVER_OPENED_NETWORKS:
        if network.version == net.version and network.overlaps(net):
            return f"{network} overlaps {net}, which no opt-in opens; name a range outside it"
    return None


def refusal_reason(address: IPAddress, allow_private: Sequence[IPNetwork] = ()) -> str | None:
    """Why `address` must not be contacted, or None when it may be."""
    never = never_opened_reason(address)
    if never is not None:
        return never
    inner = embedded_ipv4(address)
    if inner is not None:
        reason = refusal_reason(inner, allow_private)
        return None if reason is None else f"embeds {inner}, a {reason}"
    if _within(address, allow_private):
        return None
    return _blocked_label(address)


def _blocked_label(address: IPAddress) -> str | None:
    for net, label in BLOCKED_NETWORKS:
        if address.version == net.version and address in net:
            return label
    if address.is_multicast:
        return "multicast address"
    if not address.is_global and not _within(address, _DOCUMENTATION):
        # A backstop for ranges the table above does not name.
        return "address that is not globally routable"
    return None


def parse_ip_host(host: str) -> IPAddress | None:
    """The address a URL host denotes when it is an IP literal in any notation.

    Returns None for a real name. Raises DestinationRefusedError for number-like
    hosts that are not a valid address, so a resolver never gets to guess.
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    labels = bare.rstrip(".").split(".") if bare else []
    if not labels or not _NUMERIC_LABEL.match(labels[-1]):
        return None
    if not _IPV4_NUMBER_CHARS.match(bare):
        raise DestinationRefusedError(host, "number-like host that is not a valid IPv4 address")
    try:
        # inet_aton reads decimal, hex, octal and short forms exactly as the C
        # resolver would, so we check the address the OS would have used.
        return ipaddress.IPv4Address(socket.inet_aton(bare.rstrip(".")))
    except OSError:
        raise DestinationRefusedError(host, "number-like host that is not a valid IPv4 address") from None


def normalise_hostname(host: str) -> str:
    return host.strip().lower().rstrip(".")


def host_matches(host: str, pattern: str) -> bool:
    """`api.example.com` matches itself; `*.example.org` matches any subdomain, not the apex."""
    host, pattern = normalise_hostname(host), normalise_hostname(pattern)
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


@dataclass(frozen=True)
class NetworkRules:
    """A step's network opt-ins: a host allowlist and private ranges it may reach."""

    allow_hosts: tuple[str, ...] = ()
    allow_private: tuple[IPNetwork, ...] = field(default=())

    @classmethod
    def from_json(cls, text: str | None) -> NetworkRules:
        """Parse TOWLINE_NETWORK. Raises ValueError with a message naming the field."""
        if not text or not text.strip():
            return cls()
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("TOWLINE_NETWORK must be a JSON object")
        hosts = data.get("allowHosts") or []
        cidrs = data.get("allowPrivateCidrs") or []
        if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
            raise ValueError("TOWLINE_NETWORK.allowHosts must be a list of host names")
        if not isinstance(cidrs, list) or not all(isinstance(c, str) for c in cidrs):
            raise ValueError("TOWLINE_NETWORK.allowPrivateCidrs must be a list of CIDRs")
        try:
            networks = tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)
        except ValueError as exc:
            raise ValueError(f"TOWLINE_NETWORK.allowPrivateCidrs: {exc}") from None
        problems = [problem for network in networks if (problem := opt_in_problem(network)) is not None]
        if problems:
            raise ValueError(f"TOWLINE_NETWORK.allowPrivateCidrs (the step's allowPrivateNetworks): {problems[0]}")
        return cls(allow_hosts=tuple(hosts), allow_private=networks)

    def with_default_hosts(self, hosts: Sequence[str]) -> NetworkRules:
        """These rules, with `hosts` as the allowlist when the step named none."""
        return self if self.allow_hosts else NetworkRules(tuple(hosts), self.allow_private)


def blocked_cidrs() -> list[str]:
    """Every range and address the guard refuses, as CIDRs: what a step's NetworkPolicy must carve out too."""
    cidrs = [str(net) for net, _ in BLOCKED_NETWORKS]
    cidrs += [f"{address}/{address.max_prefixlen}" for address in sorted(METADATA_ADDRESSES, key=str)]
    return list(dict.fromkeys(cidrs))


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the OS resolver returns for a TCP connection to host:port."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class NetGuard:
    """Checks hosts against the rules and resolves names to validated addresses."""

    def __init__(self, rules: NetworkRules, resolver: Resolver = system_resolver) -> None:
        self.rules = rules
        self._resolver = resolver

    def with_rules(self, rules: NetworkRules) -> NetGuard:
        return NetGuard(rules, self._resolver)

    def check_host(self, host: str) -> IPAddress | None:
        """Name-level checks (allowlist, metadata names, IP literals) without DNS.

        Returns the address when the host is an IP literal.
        """
        name = normalise_hostname(host.strip("[]"))
        if not name:
            raise DestinationRefusedError(host, "empty host")
        if name in METADATA_HOSTNAMES:
            raise DestinationRefusedError(host, "cloud metadata host name")
        if self.rules.allow_hosts and not any(host_matches(name, p) for p in self.rules.allow_hosts):
            raise DestinationRefusedError(
                host, f"not in this step's allowHosts ({', '.join(self.rules.allow_hosts)}); add it there"
            )
        literal = parse_ip_host(host)
        if literal is not None:
            self._check_address(host, literal)
        return literal

    def resolve(self, host: str, port: int) -> list[IPAddress]:
        """Resolve once and validate every answer; refuse if any answer is unsafe."""
        literal = self.check_host(host)
        if literal is not None:
            return [literal]
        name = normalise_hostname(host)
        try:
            answers = self._resolver(name, port)
        except socket.gaierror as exc:
            temporary = exc.errno in (socket.EAI_AGAIN, getattr(socket, "EAI_SYSTEM", None))
            raise ResolutionError(host, exc.strerror or str(exc), temporary=temporary) from None
        if not answers:
            raise ResolutionError(host, "no addresses", temporary=True)
        addresses: list[IPAddress] = []
        for answer in answers:
            try:
                address = ipaddress.ip_address(answer.split("%", 1)[0])
            except ValueError:
                raise DestinationRefusedError(host, f"resolver returned {answer!r}, not an address") from None
            self._check_address(host, address)
            addresses.append(address)
        return addresses

    def _check_address(self, host: str, address: IPAddress) -> None:
        reason = refusal_reason(address, self.rules.allow_private)
        if reason is None:
            return
        inner = embedded_ipv4(address)
        never = never_opened_reason(address) or (inner is not None and never_opened_reason(inner))
        hint = "" if never else "; a step may opt in with network.allowPrivateCidrs"
        shown = str(address) if normalise_hostname(host.strip("[]")) == str(address) else f"{host} ({address})"
        raise DestinationRefusedError(shown, reason + hint)
