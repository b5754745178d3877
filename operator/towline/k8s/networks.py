"""CIDR arithmetic for step NetworkPolicies: what no step may reach, and a range with those parts carved out.

Pure functions over `ipaddress` networks. The ranges come from the in-pod guard
(towline_connectors.netguard), so the network layer never opens what the guard refuses.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from towline.jsontypes import JSON
from towline_connectors.netguard import (
    METADATA_ADDRESSES,
    NAT64_WELL_KNOWN,
    NEVER_OPENED_NETWORKS,
    IPAddress,
    IPNetwork,
    blocked_cidrs,
)


def needs_dns(egress: Sequence[Mapping[str, Any]], connector_ports: Sequence[int], allow_hosts: Sequence[str]) -> bool:
    """Whether the step's pod may query cluster DNS: not when it connects nowhere, nor when every host it
    may reach is an IP address (the in-pod guard refuses any name before resolving it)."""
    if not egress and not connector_ports:
        return False
    return not (allow_hosts and all(ip_literal(host) is not None for host in allow_hosts))


def forbidden_networks(
    allow_private: Sequence[str], cluster_cidrs: Sequence[str], never_open: Sequence[str] = ()
) -> list[IPNetwork]:
    """What no step pod may reach: the guard's blocked ranges and the cluster's, minus the step's opt-ins.

    Metadata addresses, local-use NAT64 (64:ff9b:1::/48) and `never_open` stay forbidden whatever
    the step opted into (even `::/0`, which validation refuses anyway). Computed once per distinct input
    (every step Job's policy asks, mostly with the same ranges; it took milliseconds each time).
    """
    return list(_forbidden_networks(tuple(allow_private), tuple(cluster_cidrs), tuple(never_open)))


@functools.lru_cache(maxsize=256)
def _forbidden_networks(
    allow_private: tuple[str, ...], cluster_cidrs: tuple[str, ...], never_open: tuple[str, ...]
) -> tuple[IPNetwork, ...]:
    blocked = [ipaddress.ip_network(c) for c in (*blocked_cidrs(), *cluster_cidrs)]
    allowed = [ipaddress.ip_network(c, strict=False) for c in allow_private]
    metadata = [ipaddress.ip_network(f"{a}/{a.max_prefixlen}") for a in METADATA_ADDRESSES]
    never = [net for net, _ in NEVER_OPENED_NETWORKS]
    pinned = [ipaddress.ip_network(c, strict=False) for c in never_open]
    return tuple(_collapse([*_subtract(blocked, allowed), *metadata, *never, *pinned]))


def ip_block_peers(network: IPNetwork, forbidden: Sequence[IPNetwork]) -> list[JSON]:
    """`network` as NetworkPolicy peers with every forbidden range inside it carved out."""
    same = [f for f in forbidden if f.version == network.version]
    if any(network.subnet_of(f) for f in same):  # type: ignore[arg-type]
        return []
    carved = sorted(str(f) for f in same if f != network and f.subnet_of(network))  # type: ignore[arg-type]
    block: JSON = {"cidr": str(network)}
    if carved:
        block["except"] = carved
    return [{"ipBlock": block}]


def connector_peers(allow_hosts: Sequence[str], forbidden: Sequence[IPNetwork]) -> list[JSON]:
    """Where a connector's ports open to; computed once per distinct input, each answer a fresh copy."""
    return [_ip_block(cidr, carved) for cidr, carved in _connector_blocks(tuple(allow_hosts), tuple(forbidden))]


def _ip_block(cidr: str, carved: tuple[str, ...]) -> JSON:
    block: JSON = {"cidr": cidr}
    if carved:
        block["except"] = list(carved)
    return {"ipBlock": block}


@functools.lru_cache(maxsize=256)
def _connector_blocks(
    allow_hosts: tuple[str, ...], forbidden: tuple[IPNetwork, ...]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((peer["ipBlock"]["cidr"], tuple(peer["ipBlock"].get("except", ())))
                 for peer in _connector_peers(allow_hosts, forbidden))


def _connector_peers(allow_hosts: Sequence[str], forbidden: Sequence[IPNetwork]) -> list[JSON]:
    literals = [ip_literal(host) for host in allow_hosts]
    if allow_hosts and all(address is not None for address in literals):
        return [peer for address in literals if address is not None
                for peer in ip_block_peers(ipaddress.ip_network(f"{address}/{address.max_prefixlen}"), forbidden)]
    peers = ip_block_peers(ipaddress.ip_network("0.0.0.0/0"), forbidden)
    peers += ip_block_peers(ipaddress.ip_network("::/0"), forbidden)
    # The well-known NAT64 prefix reaches public IPv4 through a translator: open it with the
    # translated forms of the forbidden IPv4 ranges carved out, as the guard does.
    nat64 = nat64_forms(forbidden)
    inside = [f for f in forbidden if isinstance(f, ipaddress.IPv6Network) and not NAT64_WELL_KNOWN.subnet_of(f)]
    peers += ip_block_peers(NAT64_WELL_KNOWN, [*nat64, *inside])
    return peers


def nat64_forms(networks: Sequence[IPNetwork]) -> list[IPNetwork]:
    """The IPv4 networks among `networks` as the well-known NAT64 prefix translates them."""
    return [ipaddress.ip_network(f"{NAT64_WELL_KNOWN.network_address + int(n.network_address)}/{96 + n.prefixlen}")
            for n in networks if n.version == 4]


def ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _subtract(networks: Sequence[IPNetwork], removed: Sequence[IPNetwork]) -> list[IPNetwork]:
    """`networks` without the parts inside any of `removed` (CIDRs either nest or are disjoint)."""
    result = list(networks)
    for cut in removed:
        next_round: list[IPNetwork] = []
        for net in result:
            if net.version != cut.version or not net.overlaps(cut):
                next_round.append(net)
            elif net.subnet_of(cut):  # type: ignore[arg-type]
                continue
            else:
                next_round.extend(net.address_exclude(cut))  # type: ignore[arg-type]
        result = next_round
    return result


def _collapse(networks: Sequence[IPNetwork]) -> list[IPNetwork]:
    v4 = ipaddress.collapse_addresses(n for n in networks if isinstance(n, ipaddress.IPv4Network))
    v6 = ipaddress.collapse_addresses(n for n in networks if isinstance(n, ipaddress.IPv6Network))
    return [*v4, *v6]
