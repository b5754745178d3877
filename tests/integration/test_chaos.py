"""The short chaos scenario (the full one is `make chaos`): 10 runs on the real node whose steps
call an idempotent sink, while the Lease holder is SIGKILLed once and SIGSTOPped once past its
renew deadline, and the API server and etcd each restart once.

Every run must finish Succeeded, no step attempt may get two Jobs, no step's change may be
applied twice at the sink (its retries carry the same Idempotency-Key), and the control plane,
the node and the session's operator must be back for the tests after it.
`TOWLINE_CHAOS_SEED=N` replays a plan of disruptions.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.chaos.scenario import ChaosSettings, run_chaos
from tests.integration.replicas import lease_holder
from tests.integration.support import wait_for

from towline_dev.install import OperatorProcess
from towline_dev.node.realnode import NodeCluster

# exclusive: kills and pauses operators, restarts the API server and etcd.
pytestmark = [pytest.mark.integration, pytest.mark.exclusive]
CHAOS_TIMEOUT = 1500
"""Seconds for the whole test (the runner image may be built first; 10 runs through 4 disruptions)."""


def _server(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"])


@pytest.fixture
def session_operator_aside(towline_operator: OperatorProcess, real_node_with_images: NodeCluster) -> Iterator[None]:
    """The session's operator stopped while the scenario's replicas hold the Lease, started again after."""
    plane = real_node_with_images.plane
    assert plane is not None
    towline_operator.stop()
    yield
    towline_operator.start()
    if _server(towline_operator.kubeconfig) == plane.server:
        # The next test expects the session's operator to lead; the chaos replicas' Lease lapses in 6 s.
        wait_for("the session's operator to take the Lease back",
                 lambda: lease_holder(plane, towline_operator) == towline_operator.identity, timeout=60)


@pytest.mark.timeout(CHAOS_TIMEOUT)
def test_runs_finish_once_each_through_operator_kills_pauses_and_control_plane_restarts(
    real_node_with_images: NodeCluster, session_operator_aside: None, tmp_path: Path,
) -> None:
    plane, node = real_node_with_images.plane, real_node_with_images.node
    assert plane is not None and node is not None
    seed = int(os.environ.get("TOWLINE_CHAOS_SEED") or secrets.randbelow(10**6))
    settings = ChaosSettings(runs=10, kills=1, pauses=1, seed=seed, gaps=(1.0, 4.0), timeout=600,
                             namespace="chaos-short")

    def log(message: str) -> None:
        print(f"[chaos] {message}", file=sys.__stderr__, flush=True)

    try:
        report = run_chaos(plane, settings, tmp_path, log=log)
    finally:
        plane.kubectl("delete", "namespace", settings.namespace, "--wait=false", "--ignore-not-found", check=False)
    log(f"seed {seed}; operator logs in {tmp_path}\n{report.table()}")

    assert report.violations() == [], f"seed {seed}, operator logs in {tmp_path}"
    assert report.phases == {"Succeeded": 10}
    assert sorted(h.kind for h in report.happened) == ["apiserver", "etcd", "kill", "pause"]
    assert report.sink.keys == 10 * len(settings.steps), "each step's change applied exactly once"
    assert report.sink.duplicates >= report.sink.lost_replies, "a step whose reply was lost retried with its key"
    assert plane.is_running() and node.is_running() and node.is_ready(), "the cluster is back for later tests"
