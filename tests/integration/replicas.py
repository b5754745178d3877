"""More replicas of the session operator, and the Lease they elect on.

Under `python -m tests.suite` each worker's operator has a Lease of its own (`TOWLINE_LEASE_NAME`)
and watches only the worker's namespaces, so a test may start replicas beside it, kill, pause or
stop them, and read who leads, without touching another worker's operator: the replicas are
copies of the session operator with another identity, on the same Lease and namespaces.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.integration.support import get

from towline.runtime.config import OperatorConfig
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OPERATOR_NAMESPACE, OperatorProcess


def replica_of(operator: OperatorProcess, identity: str, log_path: Path, **settings: str) -> OperatorProcess:
    """Another replica of `operator` (not started): its Lease, namespaces, step pods and settings, plus `settings`
    (e.g. shorter Lease timings); no metrics or health port (those are the session operator's)."""
    return replace(operator, identity=identity, log_path=log_path, process=None, metrics_port=0, health_port=0,
                   settings={**operator.settings, **settings})


def lease_of(cluster: ControlPlane, operator: OperatorProcess) -> dict[str, Any]:
    """The spec of the Lease `operator` and its replicas elect on; empty while there is none."""
    name = operator.settings.get("TOWLINE_LEASE_NAME") or OperatorConfig.lease_name  # as the operator reads it
    lease = get(cluster, "lease", name, OPERATOR_NAMESPACE) or {}
    spec: dict[str, Any] = lease.get("spec") or {}
    return spec


def lease_holder(cluster: ControlPlane, operator: OperatorProcess) -> str | None:
    """Who holds `operator`'s Lease now (None: nobody yet)."""
    holder: str | None = lease_of(cluster, operator).get("holderIdentity")
    return holder
