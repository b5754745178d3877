"""Integration fixtures: Towline's CRDs, the chart's RBAC and admission policies, and one operator.

Defined here, once, so every module shares the same session fixtures: a fixture imported into
several modules would be instantiated once per module, and two operators with one identity
would both believe they hold the Lease.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.support import bind_role

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess, install_chart, install_crds, operator_kubeconfig


def free_port() -> int:
    """A loopback port nobody listens on now (the operator's /metrics; tests scrape it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def crds_installed(control_plane: ControlPlane) -> ControlPlane:
    """`crds/*.yaml` applied (server-side) and Established; the control plane, for chaining."""
    install_crds(control_plane)
    return control_plane


@pytest.fixture(scope="session")
def towline_installed(crds_installed: ControlPlane) -> ControlPlane:
    """CRDs plus the chart's RBAC, ServiceAccount and admission policies."""
    install_chart(crds_installed)
    return crds_installed


@pytest.fixture(scope="session")
def towline_operator(
    towline_installed: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """One operator for the session, authenticated only as the chart's ServiceAccount."""
    work = tmp_path_factory.mktemp("operator")
    kubeconfig = operator_kubeconfig(towline_installed, work / "kubeconfig")
    process = OperatorProcess(kubeconfig=kubeconfig, log_path=work / "operator.log", metrics_port=free_port()).start()
    yield process
    process.stop()
    log = Path(process.log_path)
    keep = Path("/tmp/towline-test-logs")
    keep.mkdir(parents=True, exist_ok=True)
    (keep / "operator.log").write_bytes(log.read_bytes() if log.exists() else b"")


@pytest.fixture
def team_namespace(towline_installed: ControlPlane, namespace: str) -> str:
    """A namespace where carol may start runs and alice, bob and carol may try to decide approvals.

    Whether a decision is accepted is then up to the chart's admission policy,
    not to RBAC: that is what the approval tests exercise.
    """
    bind_role(towline_installed, namespace, "towline-runner", users=("carol", "alice", "bob"))
    bind_role(towline_installed, namespace, "towline-approver", users=("alice", "bob", "carol"))
    return namespace
