"""The operator's half of the egress isolation check: which target the step pods probe, and that no policy opens it."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from towline.k8s.objects import (
    RunRef,
    StepPodSettings,
    build_step_egress_policy,
    egress_rules,
    isolation_probe_network,
)
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.runtime.config import isolation_probe
from towline.validation.catalog import connector_catalog

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")
IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def job_env(settings: StepPodSettings, **extra: Any) -> dict[str, str]:
    job = build_step_job(
        RUN, BuiltinAction(connector_catalog()),
        job_name="r-1-call-1", step_id="call", attempt=1, action="http.request",
        inputs=extra.get("inputs", {"url": "https://example.com"}), credentials={}, idempotency_key="k",
        timeout_seconds=60, settings=settings,
    )
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"]}


def test_in_a_cluster_the_kubernetes_service_is_the_default_target() -> None:
    assert isolation_probe(IN_CLUSTER) == "10.96.0.1:443"
    assert isolation_probe({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}) == "[fd00::1]:443"


def test_an_explicit_target_wins_and_the_check_can_be_switched_off() -> None:
    assert isolation_probe({**IN_CLUSTER, "TOWLINE_ISOLATION_PROBE": "10.96.0.10:53"}) == "10.96.0.10:53"
    assert isolation_probe({**IN_CLUSTER, "TOWLINE_REQUIRE_ISOLATION": "false"}) is None


def test_required_without_any_target_stops_startup_naming_the_fix() -> None:
    with pytest.raises(ValueError, match=r"egress\.requireIsolation is on but there is no isolation probe target"):
        isolation_probe({})


@pytest.mark.parametrize(("env", "named"), [
    ({"TOWLINE_REQUIRE_ISOLATION": "yes"}, "TOWLINE_REQUIRE_ISOLATION must be true or false"),
    ({"TOWLINE_ISOLATION_PROBE": "kubernetes.default:443"}, "TOWLINE_ISOLATION_PROBE must be an IP address"),
    ({"TOWLINE_ISOLATION_PROBE": "10.96.0.1:99999"}, "TOWLINE_ISOLATION_PROBE must be an IP address"),
])
def test_bad_settings_stop_startup(env: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        isolation_probe({**IN_CLUSTER, **env})


def test_the_step_job_carries_the_operator_target_and_inputs_cannot_change_it() -> None:
    settings = StepPodSettings(isolation_probe="10.96.0.1:443")
    env = job_env(settings, inputs={"url": "https://example.com", "TOWLINE_ISOLATION_PROBE": "127.0.0.1:1"})
    assert env["TOWLINE_ISOLATION_PROBE"] == "10.96.0.1:443"
    assert "TOWLINE_ISOLATION_PROBE" not in job_env(StepPodSettings())


def test_no_step_policy_opens_the_probe_target_even_when_the_author_opts_into_its_range() -> None:
    """An author allowing the service CIDR must not open the probe address (the check would then never pass)."""
    document = build_step_egress_policy(RUN, name="r-1-call-1", step_id="call", rules=egress_rules(
        egress=[{"cidr": "10.96.0.0/12", "ports": [443]}], connector_ports=[443],
        allow_private_networks=["10.96.0.0/12"], never_open=isolation_probe_network("10.96.0.1:443"),
    ))
    probe = ipaddress.ip_address("10.96.0.1")
    neighbour = ipaddress.ip_address("10.96.0.2")
    blocks = [peer["ipBlock"] for rule in document["spec"]["egress"] for peer in rule["to"] if "ipBlock" in peer]

    def allowed(ip: ipaddress.IPv4Address) -> bool:
        return any(
            ip in ipaddress.ip_network(b["cidr"])
            and not any(ip in ipaddress.ip_network(c) for c in b.get("except", []))
            for b in blocks if ipaddress.ip_network(b["cidr"]).version == 4
        )

    assert allowed(neighbour), "the opt-in itself still works"
    assert not allowed(probe)
