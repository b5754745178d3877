"""Attack: a step aims at the API server through its NetworkPolicy.

The connector rule opens public address space (minus what the in-pod guard
refuses), and a step author may add egress CIDRs and opt into private ranges.
The API server's addresses must stay out of every step policy whatever the step
says: here the `kubernetes` Service's ClusterIP lies in 198.51.100.128/26, a
range no guard refuses (as a managed cluster's public endpoint would be), and
the step names it outright. The operator reads the addresses as its own
ServiceAccount, with `get` on exactly those objects and nothing more.
Enforcement on a real node: tests/integration/test_real_node_api_server_egress.py.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.integration.attacks.egress_support import allowed_by, one_step, start
from tests.integration.support import ScriptedServer, apply, create, get, step_policy, step_status

from towline.k8s.apiserver import except_in_step_policies
from towline.k8s.client import KubeApi
from towline.k8s.objects import RunRef, build_step_egress_policy, egress_rules
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OPERATOR_USER, OperatorProcess, StepPods

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]



def api_server_addresses(cluster: ControlPlane) -> list[str]:
    """The Service's ClusterIPs, its endpoints (none when the API server advertises loopback), and where we reach it."""
    service = get(cluster, "services", "kubernetes", "default")
    assert service is not None
    addresses: list[str] = list(service["spec"]["clusterIPs"])
    endpoint_slice = get(cluster, "endpointslices.discovery.k8s.io", "kubernetes", "default")
    if endpoint_slice is not None:
        addresses += [a for endpoint in endpoint_slice.get("endpoints") or [] for a in endpoint["addresses"]]
    host = urlsplit(cluster.server).hostname
    assert host is not None
    return [*addresses, host]


def test_no_step_policy_opens_the_api_server_whatever_the_step_asks(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    addresses = api_server_addresses(cluster)
    service_ip = addresses[0]
    with ScriptedServer() as server:  # the connector's own destination: its port opens public space
        server.script("/ok", (200, {"ok": True}, {}))
        step: dict[str, Any] = {
            "action": "http.request", "with": {"url": f"{server.url}/ok"},
            "egress": [{"cidr": "0.0.0.0/0", "ports": [443, 6443]}, {"cidr": f"{service_ip}/32"}],
            "allowPrivateNetworks": ["127.0.0.0/8"],  # opted-in private space must not reopen it either
        }
        apply(cluster, one_step(ns, "reach-api", step))
        run = start(cluster, ns, "reach-api", "reach-api-run")
    policy = step_policy(cluster, step_status(run, "call")["jobName"], ns)
    assert policy is not None, run["status"]

    opened = [address for address in addresses if allowed_by(policy, address)]
    assert opened == [], f"the step policy opens the API server at {opened}"
    excepted = {c for rule in policy["spec"]["egress"] for peer in rule.get("to", [])
                for c in peer.get("ipBlock", {}).get("except", [])}
    # The Service range is carved out of every step policy already (egress.serviceCIDRs), so the ClusterIP's
    # /32 merges into it; the API server's own address lies outside every carved range and must be named.
    carved = [ipaddress.ip_network(cidr) for cidr in StepPods().cluster_cidrs]
    outside = [a for a in addresses if not any(ipaddress.ip_address(a) in net for net in carved)]
    assert outside, addresses
    assert all(f"{a}/32" in excepted for a in outside), ("the API server's public-looking address is named, "
                                                         f"not merely inside a private range: {outside}")
    assert allowed_by(policy, "198.51.100.240"), "public space next to it stays open to the step"
    assert all(rule.get("to") for rule in policy["spec"]["egress"]), "a rule without `to` would allow everything"


def test_a_running_step_policy_is_updated_when_the_api_server_moves(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """As the operator's ServiceAccount, through the real API server: the new address is carved out in place."""
    cluster, ns = towline_installed, team_namespace
    run = RunRef(name="moved", namespace=ns, uid="00000000-0000-0000-0000-000000000002", workflow="wf")
    old = build_step_egress_policy(run, name="moved-call-1", step_id="call",
                                   rules=egress_rules(egress=[], connector_ports=[443]))
    del old["metadata"]["ownerReferences"]  # no WorkflowRun here: the garbage collector would delete it
    create(cluster, old)
    moved_to = "35.190.10.10"  # written into a policy only; nothing is sent to it
    assert allowed_by(get(cluster, "networkpolicies", "moved-call-1", ns) or {}, moved_to)

    async def update() -> int:
        api = await KubeApi.connect(str(towline_operator.kubeconfig))
        try:
            return await except_in_step_policies(api, ns, "moved", (f"{moved_to}/32",))
        finally:
            await api.close()

    assert asyncio.run(update()) == 1
    updated = get(cluster, "networkpolicies", "moved-call-1", ns)
    assert updated is not None
    assert not allowed_by(updated, moved_to) and allowed_by(updated, "35.190.10.11")
    assert asyncio.run(update()) == 0, "already excepted: nothing written"


@pytest.mark.parametrize(("verb", "resource", "namespace", "allowed"), [
    ("get", "services/kubernetes", "default", "yes"),
    ("get", "endpointslices.discovery.k8s.io/kubernetes", "default", "yes"),
    ("get", "endpoints/kubernetes", "default", "yes"),
    ("get", "services/other", "default", "no"),
    ("list", "services", "default", "no"),
    ("watch", "endpointslices.discovery.k8s.io", "default", "no"),
    ("update", "services/kubernetes", "default", "no"),
    ("patch", "endpointslices.discovery.k8s.io/kubernetes", "default", "no"),
    ("get", "services/kubernetes", "kube-system", "no"),
    ("get", "secrets/kubernetes", "default", "no"),
    # the suite's install enables code steps, which grants `get configmaps` (a code.wasm module's source is
    # checked when its run starts; test_chart.py proves the grant comes only with codeSteps.enabled): never list
    # or watch, so the operator cannot enumerate what it may read
    ("list", "configmaps", "default", "no"),
    ("watch", "configmaps", "kube-system", "no"),
])
def test_the_operator_may_read_only_the_api_server_objects_by_name(
    towline_installed: ControlPlane, verb: str, resource: str, namespace: str, allowed: str
) -> None:
    answer = towline_installed.kubectl("auth", "can-i", verb, resource, "-n", namespace, "--as", OPERATOR_USER,
                                       check=False)
    assert answer.stdout.strip() == allowed, (verb, resource, namespace, answer.stdout, answer.stderr)
