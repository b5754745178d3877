"""Where the API server is, as a step pod could reach it: the `kubernetes` Service and its endpoints.

Every step policy excepts these addresses (`never_open` of
`build_step_egress_policy`). The connector rule opens public address space,
and a managed cluster's API server often listens on a public address (its
endpoint, e.g. 443 on the provider's network): without the exception only the
in-pod guard would stand between a step and the API server. The Service's
ClusterIP is excepted too, for enforcers that judge a connection before the
Service address is translated.

Reads exactly three objects, by name, in `default` (where Kubernetes keeps
them): Service, EndpointSlice and Endpoints `kubernetes`. The chart grants
`get` on those names and nothing else there. The address this operator itself
connects to is added when it is an IP literal: an API server that advertises a
loopback address publishes no endpoints, and an operator run outside the
cluster may reach the API server at an address the Service does not show.
"""

from __future__ import annotations

import copy
import ipaddress
import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

from towline.jsontypes import JSON
from towline.k8s.client import NETWORK_POLICIES, ApiError, KubeApi, Resource
from towline.k8s.labels import LABEL_RUN
from towline.k8s.networks import ip_block_peers, nat64_forms

log = logging.getLogger(__name__)

SERVICES = Resource("", "v1", "services")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices")
ENDPOINTS = Resource("", "v1", "endpoints")
NAMESPACE = "default"
NAME = "kubernetes"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


async def read_api_server_addresses(api: KubeApi) -> tuple[str, ...]:
    """The `kubernetes` Service's cluster IPs and its endpoints' addresses, sorted; raises ApiError."""
    found: list[str] = []
    service = await api.get(SERVICES.path(NAMESPACE, NAME))
    if service is not None:
        found += service_addresses(service)
    endpoint_slice = await api.get(ENDPOINT_SLICES.path(NAMESPACE, NAME))
    if endpoint_slice is not None:
        found += endpoint_slice_addresses(endpoint_slice)
    else:  # an API server that keeps only the older Endpoints object
        endpoints = await api.get(ENDPOINTS.path(NAMESPACE, NAME))
        found += endpoints_addresses(endpoints or {})
    found += connection_address(api)
    return normalized(found)


def connection_address(api: KubeApi) -> list[str]:
    """The host this connection talks to, when it is an IP address (a name cannot be excepted by address)."""
    host = urlsplit(str(getattr(api, "server", "") or "")).hostname
    return [host] if host else []


def service_addresses(service: JSON) -> list[str]:
    spec = service.get("spec") or {}
    addresses = list(spec.get("clusterIPs") or []) or [spec.get("clusterIP") or ""]
    return [address for address in addresses if address and address != "None"]


def endpoint_slice_addresses(endpoint_slice: JSON) -> list[str]:
    return [address for endpoint in endpoint_slice.get("endpoints") or []
            for address in endpoint.get("addresses") or []]


def endpoints_addresses(endpoints: JSON) -> list[str]:
    return [str(address.get("ip")) for subset in endpoints.get("subsets") or []
            for address in subset.get("addresses") or [] if address.get("ip")]


def normalized(addresses: list[str]) -> tuple[str, ...]:
    """Valid IP addresses only (an FQDN endpoint cannot be excepted by address), each once, sorted."""
    parsed = set()
    for text in addresses:
        try:
            parsed.add(ipaddress.ip_address(text))
        except ValueError:
            continue
    return tuple(str(address) for address in sorted(parsed, key=lambda a: (a.version, int(a))))


def host_networks(addresses: tuple[str, ...]) -> tuple[str, ...]:
    """Each address as a /32 or /128 network, for a policy's `except` lists."""
    return tuple(f"{address}/{ipaddress.ip_address(address).max_prefixlen}" for address in addresses)


def except_in_policy(policy: JSON, networks: Sequence[str]) -> JSON | None:
    """`policy` with `networks` carved out of every ipBlock peer; None when it excepts them all already.

    For the policies of steps already running when the API server's addresses
    change (new ones are built with them). A peer wholly inside a network goes;
    a rule left without peers goes too, never kept with an empty `to` (which
    would allow every destination).
    """
    nets: list[IPNetwork] = [ipaddress.ip_network(n, strict=False) for n in networks]
    nets += nat64_forms(nets)  # the connector rule opens public IPv4 through the NAT64 prefix too
    spec = copy.deepcopy(policy.get("spec") or {})
    changed, rules = False, []
    for rule in spec.get("egress") or []:
        if not rule.get("to"):
            rules.append(rule)  # the operator writes no such rule; it is left as found
            continue
        peers: list[JSON] = []
        for peer in rule["to"]:
            missing = _not_excepted(peer.get("ipBlock"), nets)
            if not missing:
                peers.append(peer)
                continue
            changed = True
            block = peer["ipBlock"]
            carved = [ipaddress.ip_network(c) for c in block.get("except") or []]
            peers += ip_block_peers(ipaddress.ip_network(block["cidr"]), [*carved, *missing])
        if peers:
            rules.append({**rule, "to": peers})
    if not changed:
        return None
    spec["egress"] = rules
    return {**policy, "spec": spec}


def _not_excepted(block: JSON | None, nets: Sequence[IPNetwork]) -> list[IPNetwork]:
    if block is None:
        return []
    cidr = ipaddress.ip_network(block["cidr"])
    carved = [ipaddress.ip_network(c) for c in block.get("except") or []]
    return [n for n in nets if n.version == cidr.version and n.overlaps(cidr)
            and not any(c.version == n.version and n.subnet_of(c) for c in carved)]  # type: ignore[arg-type]


async def except_in_step_policies(api: KubeApi, namespace: str, run: str, networks: Sequence[str]) -> int:
    """Carve `networks` out of the run's step policies in place; how many were updated."""
    updated = 0
    for policy in await api.list(NETWORK_POLICIES.path(namespace), label_selector=f"{LABEL_RUN}={run}"):
        changed = except_in_policy(policy, networks)
        if changed is None:
            continue
        try:
            await api.replace(NETWORK_POLICIES.path(namespace, policy["metadata"]["name"]), changed)
        except ApiError as error:  # gone, or changed meanwhile: the next change of addresses tries again
            log.warning("could not update NetworkPolicy %s/%s: %s", namespace, policy["metadata"]["name"], error)
            continue
        updated += 1
    return updated
