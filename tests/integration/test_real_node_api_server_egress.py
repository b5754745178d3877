"""The API server excepted from a step policy, enforced on the real node, measured from inside containers.

The node's API server listens on 198.51.100.250 and its Service is
198.51.100.129: addresses no in-pod guard refuses, like a managed cluster's
public endpoint. Two step pods get a policy whose connector rule opens public
space on the API server's ports; one policy is built as before (no exception),
the other with the addresses the operator reads (`read_api_server_addresses`).
Raw TCP connects (`busybox nc`, no guard in the path) show the first reaching
the API server (the finding) and the second refused by the enforcer, once each
pod's isolation is in effect (a port neither policy opens is refused).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from tests.integration.nodesupport import create, create_step_pod, sleeper_pod, tcp_probe, wait_running
from tests.integration.support import wait_for

from towline.k8s.apiserver import host_networks, read_api_server_addresses
from towline.k8s.client import KubeApi
from towline.k8s.labels import LABEL_STEP_POD
from towline.k8s.objects import RunRef, build_default_deny_policy, build_step_egress_policy, egress_rules, step_labels
from towline_dev.controlplane import ControlPlane
from towline_dev.node.layout import KUBELET_PORT, KUBERNETES_SERVICE_IP, NODE_ADDRESS
from towline_dev.node.realnode import NodeCluster

pytestmark = pytest.mark.integration

OPEN, EXCEPTED = "apiegress-open", "apiegress-excepted"


@dataclass
class Setup:
    plane: ControlPlane
    addresses: tuple[str, ...]

    @property
    def api_server(self) -> list[tuple[str, int]]:
        return [(NODE_ADDRESS, self.plane.apiserver_port), (KUBERNETES_SERVICE_IP, 443)]

    def probe(self, namespace: str, host: str, port: int) -> str:
        return tcp_probe(self.plane, namespace, "step", host, port)


def read_addresses(plane: ControlPlane) -> tuple[str, ...]:
    async def read() -> tuple[str, ...]:
        api = await KubeApi.connect(str(plane.kubeconfig))
        try:
            return await read_api_server_addresses(api)
        finally:
            await api.close()
    return asyncio.run(read())


def wait_isolated(setup: Setup, namespace: str) -> None:
    """Until a port neither policy opens (the kubelet's) is refused from the step pod: its policies are in effect."""
    wait_for(f"{namespace}: isolation after the pod ran",
             lambda: setup.probe(namespace, NODE_ADDRESS, KUBELET_PORT) != "connected", 120, interval=0.5)


@pytest.fixture(scope="module")
def setup(real_node: NodeCluster) -> Iterator[Setup]:
    plane = real_node.plane
    assert plane is not None
    addresses = read_addresses(plane)
    found = Setup(plane, addresses)
    try:
        for namespace, never_open in ((OPEN, ()), (EXCEPTED, host_networks(addresses))):
            plane.kubectl("create", "namespace", namespace)
            run = RunRef(name="run-1", namespace=namespace, uid="00000000-0000-0000-0000-000000000003", workflow="wf")
            rules = egress_rules(egress=[], connector_ports=[443, plane.apiserver_port], never_open=never_open)
            policy = build_step_egress_policy(run, name="run-1-call", step_id="call", rules=rules)
            del policy["metadata"]["ownerReferences"]  # no WorkflowRun: the garbage collector would delete it
            for manifest in (build_default_deny_policy(namespace), policy):
                create(plane, manifest)
            create_step_pod(plane, sleeper_pod("step", namespace, {**step_labels(run, "call"), LABEL_STEP_POD: "true"}))
        for namespace in (OPEN, EXCEPTED):
            wait_running(plane, namespace, "step")
            wait_isolated(found, namespace)
        yield found
    finally:
        for namespace in (OPEN, EXCEPTED):
            plane.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


def test_the_operator_reads_the_node_api_server_and_its_service(setup: Setup) -> None:
    assert NODE_ADDRESS in setup.addresses and KUBERNETES_SERVICE_IP in setup.addresses


def test_without_the_exception_the_connector_rule_lets_a_step_reach_the_api_server(setup: Setup) -> None:
    """The finding, shown on the real enforcer: public space on the API server's port includes it."""
    for host, port in setup.api_server:
        assert setup.probe(OPEN, host, port) == "connected", f"{host}:{port}"


def test_with_the_exception_the_enforcer_refuses_the_api_server(setup: Setup) -> None:
    for host, port in setup.api_server:
        assert setup.probe(EXCEPTED, host, port) != "connected", f"{host}:{port} is reachable from the step"
