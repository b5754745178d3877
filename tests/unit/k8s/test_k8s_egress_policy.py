"""Step NetworkPolicies allow nothing the in-pod SSRF guard refuses, plus the cluster's own ranges."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from towline.k8s.egresspolicies import build_shared_egress_policy
from towline.k8s.labels import LABEL_EGRESS, LABEL_STEP
from towline.k8s.objects import RunRef, build_default_deny_policy, build_step_egress_policy, egress_rules
from towline.runtime.config import cluster_cidrs
from towline_connectors.netguard import blocked_cidrs, refusal_reason

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")


def policy(**extra: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"egress": [], "connector_ports": [443], **extra}
    return build_step_egress_policy(RUN, name="r-1-call-1", step_id="call", rules=egress_rules(**args),
                                    allow_hosts=args.get("allow_hosts", ()))


def ip_blocks(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [peer["ipBlock"] for rule in document["spec"]["egress"] for peer in rule["to"] if "ipBlock" in peer]


def allowed_by(blocks: list[dict[str, Any]], address: str) -> bool:
    ip = ipaddress.ip_address(address)
    for block in blocks:
        net = ipaddress.ip_network(block["cidr"])
        if ip.version == net.version and ip in net and not any(
            ip in ipaddress.ip_network(carved) for carved in block.get("except", []) if ip.version == net.version
        ):
            return True
    return False


SAMPLES = ["10.0.0.1", "172.16.5.5", "192.168.1.1", "127.0.0.1", "169.254.169.254", "168.63.129.16",
           "100.64.0.1", "100.100.100.200", "0.0.0.1", "224.0.0.1", "240.0.0.1", "198.18.0.1", "192.0.0.192",
           "::1", "fc00::1", "fd00:ec2::254", "fe80::1", "64:ff9b:1::cb00:7101", "64:ff9b::a00:1",
           "64:ff9b::a9fe:a9fe", "2001::1", "ff02::1"]


def test_every_address_the_guard_refuses_is_carved_out_of_the_connector_rule() -> None:
    blocks = ip_blocks(policy())
    for address in SAMPLES:
        assert refusal_reason(ipaddress.ip_address(address)) is not None, address
        assert not allowed_by(blocks, address), f"{address} is refused in the pod but open in the NetworkPolicy"


def test_public_addresses_stay_open_including_well_known_nat64() -> None:
    blocks = ip_blocks(policy())
    for address in ("203.0.113.7", "8.8.8.8", "2001:db8::1", "64:ff9b::cb00:7107"):
        assert allowed_by(blocks, address), address


def test_every_blocked_range_of_the_guard_is_in_some_except_list() -> None:
    blocks = ip_blocks(policy())
    for cidr in blocked_cidrs():
        first = ipaddress.ip_network(cidr).network_address
        assert not allowed_by(blocks, str(first)), cidr


def test_cluster_pod_and_service_cidrs_are_carved_out_too() -> None:
    blocks = ip_blocks(policy(cluster_cidrs=["203.0.113.0/26"]))
    assert not allowed_by(blocks, "203.0.113.9") and allowed_by(blocks, "203.0.113.99")


def test_a_step_egress_rule_is_carved_the_same_way() -> None:
    blocks = ip_blocks(policy(egress=[{"cidr": "0.0.0.0/0", "ports": [8443]}], connector_ports=[]))
    assert not allowed_by(blocks, "10.1.2.3") and not allowed_by(blocks, "169.254.169.254")
    assert allowed_by(blocks, "203.0.113.5")


def test_an_opted_in_private_range_opens_but_metadata_never_does() -> None:
    blocks = ip_blocks(policy(egress=[{"cidr": "10.1.0.0/16"}, {"cidr": "169.254.0.0/16"}],
                              allow_private_networks=["10.1.0.0/16", "169.254.0.0/16"]))
    assert allowed_by(blocks, "10.1.2.3") and not allowed_by(blocks, "10.2.0.1")
    assert allowed_by(blocks, "169.254.1.1") and not allowed_by(blocks, "169.254.169.254")


@pytest.mark.parametrize("opt_in", ["::/0", "64:ff9b:1::/48", "64:ff9b::/32"])
def test_local_use_nat64_stays_carved_out_whatever_the_step_opts_into(opt_in: str) -> None:
    """An opt-in as broad as ::/0 once re-opened 64:ff9b:1::/48, and so 169.254.169.254 behind a NAT64 gateway."""
    blocks = ip_blocks(policy(egress=[{"cidr": "::/0"}, {"cidr": "64:ff9b:1::/48"}],
                              allow_private_networks=[opt_in]))
    for address in ("64:ff9b:1::a9fe:a9fe", "64:ff9b:1::a00:1", "64:ff9b:1:ffff::1"):
        assert not allowed_by(blocks, address), f"{address} open with allowPrivateNetworks {opt_in}"
    assert not allowed_by(blocks, "fd00:ec2::254")


def test_an_egress_rule_inside_a_refused_range_without_opt_in_is_dropped() -> None:
    document = policy(egress=[{"cidr": "10.1.0.0/16", "ports": [5432]}], connector_ports=[])
    assert ip_blocks(document) == []


def test_allow_hosts_that_are_addresses_narrow_the_connector_rule_to_them() -> None:
    document = policy(allow_hosts=["203.0.113.10"])
    assert ip_blocks(document) == [{"cidr": "203.0.113.10/32"}]
    assert document["metadata"]["annotations"] == {"towline.dev/allow-hosts": "203.0.113.10"}


def test_allow_hosts_that_are_names_keep_public_space_and_are_recorded() -> None:
    document = policy(allow_hosts=["api.example.com"])
    assert allowed_by(ip_blocks(document), "8.8.8.8")
    assert document["metadata"]["annotations"] == {"towline.dev/allow-hosts": "api.example.com"}


DNS_RULE = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}


def test_a_step_that_may_reach_names_gets_cluster_dns() -> None:
    assert DNS_RULE in policy()["spec"]["egress"]
    assert DNS_RULE in policy(allow_hosts=["api.example.com", "203.0.113.10"])["spec"]["egress"]
    assert DNS_RULE in policy(egress=[{"cidr": "203.0.113.0/24"}], connector_ports=[])["spec"]["egress"]


@pytest.mark.parametrize(("extra", "why"), [
    ({"allow_hosts": ["203.0.113.10", "2001:db8::10"]}, "every host it may reach is an address"),
    ({"connector_ports": [], "egress": []}, "it connects nowhere (data.transform)"),
])
def test_a_step_that_resolves_no_name_gets_no_dns_so_it_cannot_tunnel_through_it(
    extra: dict[str, Any], why: str
) -> None:
    """DNS carries data out whatever allowHosts says; a step that never needs it does not get it."""
    rules = policy(**extra)["spec"]["egress"]
    assert DNS_RULE not in rules, why
    assert not any(p.get("port") == 53 for rule in rules for p in rule.get("ports", [])), why


def test_default_deny_selects_every_step_pod_and_allows_nothing() -> None:
    spec = build_default_deny_policy("team")["spec"]
    assert spec == {"podSelector": {"matchLabels": {"towline.dev/step-pod": "true"}},
                    "policyTypes": ["Ingress", "Egress"]}


def test_cluster_cidrs_come_from_the_operator_environment_and_a_bad_one_stops_startup() -> None:
    assert cluster_cidrs("10.244.0.0/16,10.96.0.0/12") == ("10.244.0.0/16", "10.96.0.0/12")
    assert cluster_cidrs("") == ()
    with pytest.raises(ValueError, match=r"TOWLINE_CLUSTER_CIDRS: 'pods' is not a CIDR; set egress\.podCIDRs"):
        cluster_cidrs("pods")


def shared(run: RunRef = RUN, **extra: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"egress": [], "connector_ports": [443], **extra}
    return build_shared_egress_policy(run, egress_rules(**arguments), arguments.get("allow_hosts", ()))


def test_steps_share_a_policy_only_when_everything_it_opens_is_the_same() -> None:
    """A shared policy names no step and opens exactly a step's own rules; any difference in what it opens, or in
    the run that owns it, makes another."""
    base = shared()
    assert base["spec"]["egress"] == policy()["spec"]["egress"]
    assert LABEL_STEP not in base["metadata"]["labels"]
    assert base["spec"]["podSelector"] == {"matchLabels": {
        "towline.dev/run": "r-1", LABEL_EGRESS: base["metadata"]["labels"][LABEL_EGRESS]}}
    variants = [shared(connector_ports=[8443]), shared(allow_hosts=["api.example.com"]),
                shared(egress=[{"cidr": "203.0.113.0/24"}]), shared(allow_private_networks=["10.1.0.0/16"]),
                shared(never_open=["198.51.100.7/32"])]
    names = {variant["metadata"]["name"] for variant in variants}
    assert base["metadata"]["name"] not in names and len(names) == len(variants)
    again = RunRef(name=RUN.name, namespace=RUN.namespace, uid="uid-2", workflow=RUN.workflow)
    assert shared(again)["metadata"]["name"] != base["metadata"]["name"], \
        "a run created again under the name never adopts the old run's policy"
