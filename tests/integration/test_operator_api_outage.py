"""An API server outage longer than kopf's whole retry budget for one request: the operator stays up
and, once the API server is back, its watches see new Workflows and runs again without a restart
(as client-go's reflectors do: they re-list and re-watch for as long as it takes).

kopf retries a failed request with its `error_backoffs` (1+1+2+3+5+8+13+21 = 54 s by default) and then
gives it up; a watch whose last answer was a 5xx or 403 (an API server starting up) then ended for good,
and the operator saw no Workflow made after the outage (this test failed so, now and then). The operator
retries past the list, with its last backoff, for as long as it takes (`towline.runtime.wiring.RetriedForever`).
The operator here gets the backoffs 1, 2, 3 s (`towline_dev.testoperator --watch-retry-budget`), so the
outage (21 s) outlasts the list several times over and the Lease (15 s) as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.attacks.attack_support import echo_workflow, install, jobs_of, run_manifest
from tests.integration.support import wait_for

from towline_dev.binaries import BinarySet
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess, install_chart, install_crds, operator_kubeconfig

# Concurrent-safe: the API server it takes away is of a control plane of its own (own ports, own state, its own
# operator), never the shared one the other workers use.
pytestmark = [pytest.mark.integration, pytest.mark.local_only]

NAMESPACE = "default"


WATCH_RETRY_BUDGET = (1.0, 2.0, 3.0)
"""kopf's backoffs between attempts of one request, for this test's operator (kopf's default sums to 54 s)."""


@pytest.fixture(scope="module")
def plane(k8s_binaries: BinarySet) -> Iterator[ControlPlane]:
    """A control plane of its own (no node: the test needs the operator's watches, not containers);
    stopping the session's API server for a minute would disturb the node and the other tests."""
    own = ControlPlane(k8s_binaries, install_signal_handlers=False).start()
    install_crds(own)
    install_chart(own)
    yield own
    own.remove_state()


@pytest.fixture
def operator(plane: ControlPlane, tmp_path: Path) -> Iterator[OperatorProcess]:
    process = OperatorProcess(kubeconfig=operator_kubeconfig(plane, tmp_path / "kubeconfig"),
                              log_path=tmp_path / "operator.log", watch_retry_budget=WATCH_RETRY_BUDGET).start()
    yield process
    process.stop()


def start_run(plane: ControlPlane, name: str) -> None:
    plane.kubectl("create", "-f", "-", stdin=json.dumps(run_manifest(NAMESPACE, "echo", name, "admin")))


def wait_for_first_job(plane: ControlPlane, run: str, timeout: float) -> None:
    wait_for(f"the operator to create the first Job of {run}", lambda: jobs_of(plane, NAMESPACE, run),
             timeout=timeout)


def test_the_operator_watches_again_after_an_outage_longer_than_kopfs_retries(
    plane: ControlPlane, operator: OperatorProcess,
) -> None:
    install(plane, echo_workflow(NAMESPACE, "echo"))
    start_run(plane, "before-outage")
    wait_for_first_job(plane, "before-outage", timeout=90)

    down = sum(WATCH_RETRY_BUDGET) + 15
    plane.restart_component("kube-apiserver", down_seconds=down)
    assert operator.process is not None and operator.process.poll() is None, operator.log_text()[-3000:]
    log = operator.log_text()
    assert "Request attempt #5 failed" in log, "the outage did not outlast the listed backoffs of a request"
    assert "escalating" not in log, "a request was given up"

    # A Workflow and a run created after the outage: both reach the operator through its watches. The last
    # backoff before a new watch request is at most 3 s, so a minute is ample.
    install(plane, echo_workflow(NAMESPACE, "after"))
    start_run(plane, "after-outage")
    wait_for_first_job(plane, "after-outage", timeout=90)
    assert operator.process.poll() is None
