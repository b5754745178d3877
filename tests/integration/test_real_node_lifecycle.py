"""The real node stops without leaving anything on the machine, and starts again."""

from __future__ import annotations

import sys
import time

import pytest
from tests.integration.nodesupport import create, sleeper_pod, wait_running

from towline_dev.node.leftovers import leftovers, netns_names
from towline_dev.node.network import run
from towline_dev.node.probehosts import TestHostNetwork
from towline_dev.node.realnode import NodeCluster

# exclusive: stops and starts the node.
pytestmark = pytest.mark.exclusive


def test_node_stops_without_leftovers_and_starts_again(real_node: NodeCluster) -> None:
    plane = real_node.plane
    assert plane is not None
    state_dir = real_node.state_dir
    netns_before = set(netns_names(state_dir))  # CoreDNS's sandbox is in here already: it must go too
    plane.kubectl("create", "namespace", "lifecycle")
    create(plane, sleeper_pod("probe", "lifecycle"))
    wait_running(plane, "lifecycle", "probe")
    in_use = set(netns_names(state_dir))
    assert in_use - netns_before, "a running pod has a network namespace of its own, under the node's state"
    assert "KUBE-SERVICES" in run(["iptables-save"]).stdout, "kube-proxy's rules are in place while running"

    real_node.stop()

    # The tests' identity provider (towline_dev.idp), when an earlier test of the session started it, runs from a
    # directory of the control plane's state: a service of the test session that its fixture stops at the end,
    # not a part of the node. Everything else the node ran must be gone.
    provider = str(plane.state_dir / "idp")
    assert [found for found in leftovers(state_dir, in_use) if provider not in found] == []
    # What a test run killed with its node leaves (it made the test hosts beside it): the next node clears it.
    TestHostNetwork().start()
    started = time.monotonic()
    real_node.start()
    assert not TestHostNetwork.present()
    print(f"\n[real node] restarted (control plane + node, warm) in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    assert real_node.node is not None
    assert real_node.node.is_ready()
