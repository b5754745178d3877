"""Every step policy excepts the API server's addresses, even a public endpoint the connector rule would open.

The addresses stand for a managed cluster whose API server endpoint is public
(port 443 on the provider's network); no traffic is sent in these tests.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import Any

import pytest
from tests.unit.k8s.test_k8s_egress_policy import allowed_by, ip_blocks, policy

from towline.k8s.apiserver import (
    ENDPOINT_SLICES,
    ENDPOINTS,
    SERVICES,
    endpoint_slice_addresses,
    endpoints_addresses,
    except_in_policy,
    host_networks,
    normalized,
    read_api_server_addresses,
    service_addresses,
)
from towline.k8s.client import ApiError
from towline.runtime.apiserver import ApiServerAddresses, ApiServerUnknown

PUBLIC_ENDPOINT = "35.190.10.10"
PUBLIC_ENDPOINT_V6 = "2600:1900:4000::10"
API_SERVER = host_networks((PUBLIC_ENDPOINT, PUBLIC_ENDPOINT_V6))


def test_the_connector_rule_opens_a_public_api_server_unless_it_is_excepted() -> None:
    assert allowed_by(ip_blocks(policy()), PUBLIC_ENDPOINT), "the finding: 0.0.0.0/0 minus blocked ranges"
    blocks = ip_blocks(policy(never_open=API_SERVER))
    assert not allowed_by(blocks, PUBLIC_ENDPOINT)
    assert not allowed_by(blocks, PUBLIC_ENDPOINT_V6)
    assert allowed_by(blocks, "35.190.10.11") and allowed_by(blocks, "2600:1900:4000::11"), "only the API server"
    assert any(f"{PUBLIC_ENDPOINT}/32" in block.get("except", []) for block in blocks)
    assert any(f"{PUBLIC_ENDPOINT_V6}/128" in block.get("except", []) for block in blocks)


def test_the_api_server_is_not_reachable_through_the_nat64_prefix_either() -> None:
    nat64 = int(ipaddress.ip_address("64:ff9b::"))
    translated = ipaddress.ip_address(nat64 + int(ipaddress.ip_address(PUBLIC_ENDPOINT)))
    blocks = ip_blocks(policy(never_open=API_SERVER))
    assert not allowed_by(blocks, str(translated))
    assert allowed_by(blocks, str(translated + 1))


def test_a_step_egress_cidr_around_the_api_server_excepts_it() -> None:
    blocks = ip_blocks(policy(egress=[{"cidr": "35.190.0.0/16", "ports": [443]}], connector_ports=[],
                              never_open=API_SERVER))
    assert not allowed_by(blocks, PUBLIC_ENDPOINT) and allowed_by(blocks, "35.190.99.1")


def test_an_egress_rule_naming_only_the_api_server_is_dropped_not_left_open() -> None:
    document = policy(egress=[{"cidr": f"{PUBLIC_ENDPOINT}/32", "ports": [443]}], connector_ports=[],
                      never_open=API_SERVER)
    assert ip_blocks(document) == []
    assert all(rule.get("to") for rule in document["spec"]["egress"]), "a rule without `to` would allow everything"


def test_allow_hosts_naming_the_api_server_address_open_nothing() -> None:
    document = policy(allow_hosts=[PUBLIC_ENDPOINT], never_open=API_SERVER)
    assert ip_blocks(document) == []


def test_a_private_api_server_stays_excepted_when_the_step_opts_into_its_range() -> None:
    private = host_networks(("10.0.0.5", "10.96.0.1"))
    blocks = ip_blocks(policy(egress=[{"cidr": "10.0.0.0/8"}], allow_private_networks=["10.0.0.0/8"],
                              never_open=private))
    assert allowed_by(blocks, "10.0.0.6")
    assert not allowed_by(blocks, "10.0.0.5") and not allowed_by(blocks, "10.96.0.1")


def test_addresses_come_from_the_service_the_endpoint_slice_and_the_endpoints() -> None:
    assert service_addresses({"spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1", "fd00:10:96::1"]}}) == [
        "10.96.0.1", "fd00:10:96::1"]
    assert service_addresses({"spec": {"clusterIP": "None"}}) == []
    assert endpoint_slice_addresses({"endpoints": [{"addresses": [PUBLIC_ENDPOINT]}, {"addresses": ["35.190.10.12"]}]}
                                    ) == [PUBLIC_ENDPOINT, "35.190.10.12"]
    assert endpoints_addresses({"subsets": [{"addresses": [{"ip": PUBLIC_ENDPOINT}], "ports": [{"port": 443}]}]}) == [
        PUBLIC_ENDPOINT]
    assert normalized(["api.example.com", "10.96.0.1", PUBLIC_ENDPOINT, "10.96.0.1", "fd00::1"]) == (
        "10.96.0.1", PUBLIC_ENDPOINT, "fd00::1")


class Objects:
    """GET by path only, as the chart's Role allows; anything else is a bug of the reader."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects
        self.paths: list[str] = []

    async def get(self, path: str) -> Any:
        self.paths.append(path)
        return self.objects.get(path)


def test_the_reader_gets_the_three_objects_by_name_and_falls_back_to_endpoints() -> None:
    service = {"spec": {"clusterIPs": ["10.96.0.1"]}}
    endpoints = {"subsets": [{"addresses": [{"ip": PUBLIC_ENDPOINT}]}]}
    api = Objects({SERVICES.path("default", "kubernetes"): service, ENDPOINTS.path("default", "kubernetes"): endpoints})
    assert asyncio.run(read_api_server_addresses(api)) == ("10.96.0.1", PUBLIC_ENDPOINT)  # type: ignore[arg-type]
    assert api.paths == [SERVICES.path("default", "kubernetes"), ENDPOINT_SLICES.path("default", "kubernetes"),
                         ENDPOINTS.path("default", "kubernetes")]


def test_no_step_policy_before_the_addresses_are_known_and_a_failed_refresh_keeps_the_last_good_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers: list[tuple[str, ...] | ApiError] = [ApiError(403, "forbidden"), (PUBLIC_ENDPOINT,),
                                                 ApiError(503, "unavailable"), (PUBLIC_ENDPOINT, "35.190.10.12")]

    async def read() -> tuple[str, ...]:
        answer = answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer

    addresses = ApiServerAddresses(read)
    with pytest.raises(ApiServerUnknown, match="towline-operator-api-server"):
        addresses.networks()
    with caplog.at_level(logging.ERROR):
        assert asyncio.run(addresses.refresh()) is False
    assert "403" in caplog.text
    with pytest.raises(ApiServerUnknown, match="403"):
        addresses.networks()
    assert asyncio.run(addresses.refresh()) is True
    assert addresses.networks() == (f"{PUBLIC_ENDPOINT}/32",)
    assert asyncio.run(addresses.refresh()) is False
    assert addresses.networks() == (f"{PUBLIC_ENDPOINT}/32",)
    assert asyncio.run(addresses.refresh()) is True
    assert addresses.networks() == (f"{PUBLIC_ENDPOINT}/32", "35.190.10.12/32")


def test_a_read_that_names_no_address_is_not_taken_for_an_empty_set() -> None:
    async def read() -> tuple[str, ...]:
        return ()

    addresses = ApiServerAddresses(read)
    assert asyncio.run(addresses.refresh()) is False
    with pytest.raises(ApiServerUnknown, match="name no IP address"):
        addresses.networks()


@pytest.mark.parametrize(("server", "expected"), [
    ("https://35.190.10.10:443", (PUBLIC_ENDPOINT,)),
    ("https://[2600:1900:4000::10]:6443", (PUBLIC_ENDPOINT_V6,)),
    ("https://api.cluster.example.com", ()),
])
def test_the_address_the_operator_connects_to_is_excepted_when_it_is_one(
    server: str, expected: tuple[str, ...]
) -> None:
    """An API server advertising loopback publishes no endpoints; an operator outside reaches it elsewhere."""
    api = Objects({})
    api.server = server  # type: ignore[attr-defined]
    assert asyncio.run(read_api_server_addresses(api)) == expected  # type: ignore[arg-type]


def nat64(address: str) -> str:
    return str(ipaddress.ip_address(int(ipaddress.ip_address("64:ff9b::")) + int(ipaddress.ip_address(address))))


def test_a_running_step_policy_is_updated_to_what_a_new_one_would_open() -> None:
    """The API server moved: the running step's policy, updated in place, opens what a new policy would."""
    old = policy(egress=[{"cidr": "35.190.0.0/16", "ports": [443]}], never_open=host_networks(("35.190.1.1",)))
    updated = except_in_policy(old, API_SERVER)
    assert updated is not None
    fresh = policy(egress=[{"cidr": "35.190.0.0/16", "ports": [443]}],
                   never_open=(*host_networks(("35.190.1.1",)), *API_SERVER))
    samples = [PUBLIC_ENDPOINT, "35.190.10.11", "35.190.1.1", "35.190.99.1", "8.8.8.8", "10.0.0.1",
               PUBLIC_ENDPOINT_V6, "2600:1900:4000::11", nat64(PUBLIC_ENDPOINT), nat64("8.8.8.8")]
    for address in samples:
        assert allowed_by(ip_blocks(updated), address) == allowed_by(ip_blocks(fresh), address), address
    assert not allowed_by(ip_blocks(updated), PUBLIC_ENDPOINT)
    assert except_in_policy(updated, API_SERVER) is None, "already excepted: nothing to write"
    assert updated["metadata"] == old["metadata"]


def test_an_updated_rule_left_with_no_peer_is_dropped_not_left_open() -> None:
    old = policy(egress=[{"cidr": f"{PUBLIC_ENDPOINT}/32", "ports": [443]}], connector_ports=[])
    updated = except_in_policy(old, API_SERVER)
    assert updated is not None
    assert ip_blocks(updated) == []
    assert updated["spec"]["egress"] and all(rule.get("to") for rule in updated["spec"]["egress"])


def test_running_steps_are_updated_only_when_known_addresses_change() -> None:
    answers = [(PUBLIC_ENDPOINT,), (PUBLIC_ENDPOINT,), ("35.190.10.12",)]
    told: list[tuple[str, ...]] = []

    async def read() -> tuple[str, ...]:
        return answers.pop(0)

    async def changed(networks: tuple[str, ...]) -> None:
        told.append(networks)

    addresses = ApiServerAddresses(read, changed=changed)
    for _ in range(3):
        assert asyncio.run(addresses.refresh()) is True
    assert told == [("35.190.10.12/32",)], "not on the first read (no policy predates it), not when unchanged"
