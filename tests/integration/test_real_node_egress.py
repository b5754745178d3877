"""Egress isolation of a step pod, measured from inside a real container on the real node.

The step's NetworkPolicies are the ones the operator builds (default deny + the
step's egress policy allowing one test host, as the run's steps of that egress
share it). A sibling step of the same run, whose own policy opens nothing, is
let out by none of its run's policies. A raw TCP connect from the step
container reaches that host and is refused everywhere else: another test host, the
API server, the node, a cloud-metadata address and a DNS server that is not
cluster DNS. A control pod in a namespace without policies reaches each of them
(or, for the metadata address where nothing listens, its connection attempt
arrives), so every refusal is the enforcer's doing.

Enforcement lags pod start (the NetworkPolicy controller acts after the pod is
running), so the tests first wait until the policy is in effect and print the lag.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from tests.integration.nodesupport import create, create_step_pod, exec_in, sleeper_pod, tcp_probe, wait_running
from tests.integration.support import wait_for

from towline.k8s.egresspolicies import build_shared_egress_policy
from towline.k8s.labels import LABEL_EGRESS, LABEL_STEP_POD
from towline.k8s.objects import RunRef, build_default_deny_policy, egress_rules, step_labels
from towline_dev.node.layout import KUBELET_PORT, KUBERNETES_SERVICE_IP, NODE_ADDRESS
from towline_dev.node.probehosts import METADATA_ADDRESS, ProbeHosts
from towline_dev.node.realnode import NodeCluster

ALLOWED = "198.51.100.202:8080"
OTHER_HOST = "198.51.100.212:8080"
OTHER_DNS = "198.51.100.213:53"
METADATA = f"{METADATA_ADDRESS}:80"


@dataclass
class EgressSetup:
    cluster: NodeCluster
    hosts: ProbeHosts
    step_ns: str
    control_ns: str
    lag_seconds: float

    @property
    def apiserver(self) -> str:
        assert self.cluster.plane is not None
        return f"{NODE_ADDRESS}:{self.cluster.plane.apiserver_port}"

    def probe(self, namespace: str, endpoint: str) -> str:
        assert self.cluster.plane is not None
        host, port = endpoint.rsplit(":", 1)
        return tcp_probe(self.cluster.plane, namespace, "probe", host, int(port))


@pytest.fixture(scope="module")
def egress(real_node: NodeCluster, test_hosts: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EgressSetup]:
    # `test_hosts`: the session's test-hosts namespace, which these listeners join (and leave) only.
    plane = real_node.plane
    assert plane is not None
    hosts = ProbeHosts([ALLOWED, OTHER_HOST, OTHER_DNS, METADATA], tmp_path_factory.mktemp("testhosts")).start()
    step_ns, control_ns = "egress-step", "egress-control"
    try:
        run = RunRef(name="run-1", namespace=step_ns, uid="00000000-0000-0000-0000-000000000001", workflow="wf")
        egress_policy = build_shared_egress_policy(run, egress_rules(
            egress=[{"cidr": ALLOWED.split(":", maxsplit=1)[0] + "/32", "ports": [8080]}], connector_ports=[],
        ), allow_hosts=())
        sibling_policy = build_shared_egress_policy(run, egress_rules(egress=[], connector_ports=[]), allow_hosts=())
        # No WorkflowRun exists here: without this the garbage collector would delete the policies.
        for policy in (egress_policy, sibling_policy):
            del policy["metadata"]["ownerReferences"]
        for namespace in (step_ns, control_ns):
            plane.kubectl("create", "namespace", namespace)
        for manifest in (build_default_deny_policy(step_ns), egress_policy, sibling_policy):
            create(plane, manifest)
        for pod, step, policy in (("probe", "fetch", egress_policy), ("sibling", "report", sibling_policy)):
            create_step_pod(plane, sleeper_pod(pod, step_ns, {
                **step_labels(run, step), LABEL_STEP_POD: "true",
                LABEL_EGRESS: policy["metadata"]["labels"][LABEL_EGRESS]}))
        create(plane, sleeper_pod("probe", control_ns))
        wait_running(plane, control_ns, "probe")
        wait_running(plane, step_ns, "probe")
        wait_running(plane, step_ns, "sibling")
        started = time.monotonic()
        host, port = OTHER_HOST.split(":")

        def in_effect() -> bool:  # once a probe of the other host fails without its SYN arriving, from both pods
            arrived = hosts.arrived(OTHER_HOST)
            outcomes = [tcp_probe(plane, step_ns, pod, host, int(port), wait=1) for pod in ("probe", "sibling")]
            return "connected" not in outcomes and hosts.arrived(OTHER_HOST) == arrived

        wait_for("the egress policy to be in effect after pod start", in_effect, 120, interval=0.2)
        lag = time.monotonic() - started
        print(f"\n[real node] egress isolation in effect {lag:.1f} s after the step container ran", file=sys.stderr)
        yield EgressSetup(real_node, hosts, step_ns, control_ns, lag)
    finally:
        hosts.stop()
        for namespace in (step_ns, control_ns):
            plane.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


def test_step_reaches_the_host_its_policy_allows(egress: EgressSetup) -> None:
    before = egress.hosts.arrived(ALLOWED)
    assert egress.probe(egress.step_ns, ALLOWED) == "connected"
    assert egress.hosts.arrived(ALLOWED) > before


def test_a_sibling_step_is_let_out_by_none_of_its_runs_other_policies(egress: EgressSetup) -> None:
    """The run's policy for the other step's egress opens ALLOWED; the sibling, whose own opens nothing, is held."""
    plane = egress.cluster.plane
    assert plane is not None
    assert egress.probe(egress.step_ns, ALLOWED) == "connected", "the fetch step's policy is in effect"
    before = egress.hosts.arrived(ALLOWED)
    host, port = ALLOWED.split(":")
    assert tcp_probe(plane, egress.step_ns, "sibling", host, int(port)) != "connected"
    assert egress.hosts.arrived(ALLOWED) == before, "the sibling's SYN reached the host another step may reach"


@pytest.mark.parametrize("endpoint", [OTHER_HOST, OTHER_DNS, METADATA], ids=["other-host", "other-dns", "metadata"])
def test_step_connection_to_a_test_host_never_arrives(egress: EgressSetup, endpoint: str) -> None:
    before = egress.hosts.arrived(endpoint)
    control = egress.probe(egress.control_ns, endpoint)
    after_control = egress.hosts.arrived(endpoint)
    assert after_control > before, f"the control pod's attempt to {endpoint} ({control}) never arrived"
    assert egress.probe(egress.step_ns, endpoint) != "connected"
    assert egress.hosts.arrived(endpoint) == after_control, f"the step's SYN reached {endpoint}"


@pytest.mark.parametrize("target", ["apiserver", "apiserver-service", "kubelet"])
def test_step_cannot_reach_the_api_server_or_the_node(egress: EgressSetup, target: str) -> None:
    endpoint = {
        "apiserver": egress.apiserver,
        "apiserver-service": f"{KUBERNETES_SERVICE_IP}:443",
        "kubelet": f"{NODE_ADDRESS}:{KUBELET_PORT}",
    }[target]
    assert egress.probe(egress.control_ns, endpoint) == "connected", "the control pod must reach it"
    assert egress.probe(egress.step_ns, endpoint) != "connected"


def test_step_dns_queries_to_another_server_never_arrive(egress: EgressSetup) -> None:
    """DNS is the classic way out: a query to any server but cluster DNS must not leave the pod."""
    plane = egress.cluster.plane
    assert plane is not None
    server = OTHER_DNS.split(":", maxsplit=1)[0]
    before = egress.hosts.arrived(OTHER_DNS, "udp")
    exec_in(plane, egress.control_ns, "probe", "/bin/busybox", "timeout", "3",
            "/bin/busybox", "nslookup", "exfil.example", server)
    after_control = egress.hosts.arrived(OTHER_DNS, "udp")
    assert after_control > before, "the control pod's query never arrived"
    exec_in(plane, egress.step_ns, "probe", "/bin/busybox", "timeout", "3",
            "/bin/busybox", "nslookup", "exfil.example", server)
    assert egress.hosts.arrived(OTHER_DNS, "udp") == after_control, "the step's DNS query reached another server"


def test_step_resolves_names_through_cluster_dns(egress: EgressSetup) -> None:
    plane = egress.cluster.plane
    assert plane is not None
    result = exec_in(plane, egress.step_ns, "probe", "/bin/busybox", "nslookup", "kubernetes.default.svc.cluster.local")
    assert KUBERNETES_SERVICE_IP in result.stdout, result.stdout + result.stderr
