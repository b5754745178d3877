"""A step makes no call until its pod's egress isolation is in effect (the runner's isolation check).

Real node, real runner image, the operator's own policies and Job. The step's
destination is a test host its policy allows; its SYNs are counted where they
arrive. The NetworkPolicy enforcer (kube-router) is paused with SIGSTOP to play a
slow or missing enforcer: a new pod then runs unprotected until it is continued.

- paused while the pod starts, continued a few seconds later: no SYN reaches the
  destination while paused; the step runs once the enforcer has isolated the pod;
- paused for the whole attempt: it fails as transient with the documented message
  and nothing reaches the destination;
- with the check off (`egress.requireIsolation: false`) the step runs while the
  enforcer is paused: the control showing the first case's silence is the check's doing;
- a user step type (the Go example, a raw connect with no guard of its own): its
  container does not even start while the enforcer is paused, because the runner's
  `prepare` init container proves isolation first; once continued it connects.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from tests.integration.isolationsupport import (
    DESTINATION,
    PROBE,
    container_state,
    finished,
    init_container_state,
    isolation_wait_seconds,
    prepare_namespace,
    start_step,
    start_user_step,
    wait_state,
)
from tests.integration.support import wait_for

from towline.k8s.objects import RunRef
from towline_connectors.isolation import NOT_ISOLATED_MESSAGE
from towline_dev.controlplane import ControlPlane
from towline_dev.node.probehosts import ProbeHosts
from towline_dev.node.realnode import NodeCluster, RealNode

# exclusive: pauses the node's NetworkPolicy enforcer.
pytestmark = pytest.mark.exclusive

NAMESPACE = "isolation-check"
PAUSE_SECONDS = 5.0


@dataclass
class Setup:
    plane: ControlPlane
    node: RealNode
    hosts: ProbeHosts
    run: RunRef

    def arrived(self) -> int:
        return self.hosts.arrived(DESTINATION)


@pytest.fixture(scope="module")
def setup(real_node_with_images: NodeCluster, test_hosts: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    # `test_hosts`: the session's test-hosts namespace, which these listeners join (and leave) only.
    plane, node = real_node_with_images.plane, real_node_with_images.node
    assert plane is not None and node is not None
    hosts = ProbeHosts([DESTINATION], tmp_path_factory.mktemp("testhosts")).start()
    try:
        yield Setup(plane, node, hosts, prepare_namespace(plane, NAMESPACE))
    finally:
        hosts.stop()
        plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found", check=False)


def test_no_connection_leaves_the_pod_until_the_enforcer_isolates_it(setup: Setup) -> None:
    before = setup.arrived()
    with setup.node.paused("kube-router"):
        pod = start_step(setup.plane, setup.run, 1, isolation_probe=PROBE)
        wait_state(setup.plane, NAMESPACE, pod, "running")
        time.sleep(PAUSE_SECONDS)  # the runner is up and probing; the pod is not isolated
        assert "running" in wait_state(setup.plane, NAMESPACE, pod, "running"), "the step gave up too early"
        assert setup.arrived() == before, "the step reached its destination before its isolation was in effect"
    result, log = finished(setup.plane, NAMESPACE, pod)
    waited = isolation_wait_seconds(log)
    print(f"\n[real node] isolation proven {waited} s after the runner started (enforcer paused "
          f"{PAUSE_SECONDS:.0f} s)", file=sys.stderr)
    assert waited is not None, log
    assert result.get("message") != NOT_ISOLATED_MESSAGE, result
    assert setup.arrived() > before, f"the step never called its destination once isolated: {result} {log}"


def test_with_the_enforcer_stopped_the_attempt_fails_as_transient(setup: Setup) -> None:
    before = setup.arrived()
    with setup.node.paused("kube-router"):
        # A 30 s step: the runner's deadline is 25 s, a quarter of it (6.25 s) is the isolation budget.
        pod = start_step(setup.plane, setup.run, 2, isolation_probe=PROBE, timeout_seconds=30)
        result, log = finished(setup.plane, NAMESPACE, pod, timeout=120)
        assert setup.arrived() == before, "the step reached its destination without isolation"
    assert (result["ok"], result["errorClass"], result["retryable"]) == (False, "transient", True), result
    assert result["message"] == NOT_ISOLATED_MESSAGE
    assert "egress isolation not in effect after" in log and "running http.request" not in log, log


def test_with_require_isolation_off_the_step_runs_unprotected(setup: Setup) -> None:
    before = setup.arrived()
    with setup.node.paused("kube-router"):
        pod = start_step(setup.plane, setup.run, 3, isolation_probe=None)
        result, log = finished(setup.plane, NAMESPACE, pod)
        arrived = setup.arrived()
    assert arrived > before, f"the step did not run: {result} {log}"
    assert "egress isolation" not in log and result.get("message") != NOT_ISOLATED_MESSAGE, log


def test_a_step_types_container_starts_only_once_the_enforcer_isolates_the_pod(setup: Setup) -> None:
    before = setup.arrived()
    with setup.node.paused("kube-router"):
        pod = start_user_step(setup.plane, setup.run, 4)
        wait_for("the runner's prepare to be probing",
                 lambda: "running" in init_container_state(setup.plane, NAMESPACE, pod), timeout=180, interval=0.2)
        time.sleep(PAUSE_SECONDS)  # prepare is up and probing; the pod is not isolated
        assert "running" in init_container_state(setup.plane, NAMESPACE, pod), "prepare gave up too early"
        assert "waiting" in container_state(setup.plane, NAMESPACE, pod), "the user's container started unisolated"
        assert setup.arrived() == before, "something reached the destination before the pod was isolated"
    result, _ = finished(setup.plane, NAMESPACE, pod)
    prepare_log = setup.plane.kubectl("logs", "-n", NAMESPACE, pod, "-c", "prepare", check=False).stdout
    print(f"\n[real node] user step type: isolation proven {isolation_wait_seconds(prepare_log)} s after prepare "
          f"started (enforcer paused {PAUSE_SECONDS:.0f} s)", file=sys.stderr)
    assert result["ok"] is True and result["output"]["connect"]["connected"] is True, result
    assert setup.arrived() > before, "the user's container never reached its destination once isolated"
