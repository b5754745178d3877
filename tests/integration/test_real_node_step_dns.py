"""DNS on the real node: a step whose every host is an IP address gets no DNS, so it cannot tunnel data out
through cluster DNS; a step that reaches names still resolves them.

Both step pods carry the operator's own policies (default deny + `build_step_egress_policy`). The enforcer
acts a moment after a pod runs, so the test waits until the address-only step's lookups fail, then shows the
named step's lookups succeed at the same time: the refusal is its policy's, not a broken cluster DNS.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.integration.nodesupport import create, create_step_pod, exec_in, sleeper_pod, wait_running
from tests.integration.support import wait_for

from towline.k8s.labels import LABEL_STEP_POD
from towline.k8s.objects import RunRef, build_default_deny_policy, build_step_egress_policy, egress_rules, step_labels
from towline_dev.controlplane import ControlPlane
from towline_dev.node.layout import KUBERNETES_SERVICE_IP
from towline_dev.node.realnode import NodeCluster

pytestmark = [pytest.mark.integration]

NAMESPACE = "step-dns"
NAME = "kubernetes.default.svc.cluster.local"
STEPS = {"named": ["api.example.com"], "literal": ["198.51.100.202"]}


@pytest.fixture(scope="module")
def plane(real_node: NodeCluster) -> Iterator[ControlPlane]:
    plane = real_node.plane
    assert plane is not None
    run = RunRef(name="run-1", namespace=NAMESPACE, uid="00000000-0000-0000-0000-000000000003", workflow="wf")
    plane.kubectl("create", "namespace", NAMESPACE)
    try:
        create(plane, build_default_deny_policy(NAMESPACE))
        for step, hosts in STEPS.items():
            rules = egress_rules(egress=[], connector_ports=[8080], allow_hosts=hosts)
            policy = build_step_egress_policy(run, name=f"run-1-{step}", step_id=step, rules=rules, allow_hosts=hosts)
            del policy["metadata"]["ownerReferences"]  # no WorkflowRun here: the garbage collector would delete it
            create(plane, policy)
            create_step_pod(plane, sleeper_pod(step, NAMESPACE, {**step_labels(run, step), LABEL_STEP_POD: "true"}))
        for step in STEPS:
            wait_running(plane, NAMESPACE, step)
        yield plane
    finally:
        plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found", check=False)


def resolves(plane: ControlPlane, pod: str) -> bool:
    result = exec_in(plane, NAMESPACE, pod, "/bin/busybox", "timeout", "3", "/bin/busybox", "nslookup", NAME)
    return KUBERNETES_SERVICE_IP in result.stdout


def test_a_step_whose_hosts_are_all_addresses_cannot_query_dns(plane: ControlPlane) -> None:
    wait_for("the address-only step to stop resolving names", lambda: not resolves(plane, "literal"), 120,
             interval=0.5)
    assert resolves(plane, "named"), "the control: a step that reaches names resolves them through cluster DNS"
    assert not resolves(plane, "literal")
