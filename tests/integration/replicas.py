"""More replicas of the session operator, the Lease they elect on, and an operator in its place for one test.

Under `python -m tests.suite` each worker's operator has a Lease of its own (`TOWLINE_LEASE_NAME`)
and watches only the worker's namespaces, so a test may start replicas beside it, kill, pause or
stop them, and read who leads, without touching another worker's operator: the replicas are
copies of the session operator with another identity, on the same Lease and namespaces.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.integration.support import get
from tests.keptlogs import kept_logs_root

from towline.runtime.config import OperatorConfig
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OPERATOR_NAMESPACE, OperatorProcess


def replica_of(operator: OperatorProcess, identity: str, log_path: Path, **settings: str) -> OperatorProcess:
    """Another replica of `operator` (not started): its Lease, namespaces, step pods and settings, plus `settings`
    (e.g. shorter Lease timings); no metrics or health port (those are the session operator's)."""
    return replace(operator, identity=identity, log_path=log_path, process=None, metrics_port=0, health_port=0,
                   settings={**operator.settings, **settings})


@contextmanager
def in_place_of(
    operator: OperatorProcess, work: Path, *, settings: Mapping[str, str] = {}, clock_file: Path | None = None,
    kept_log: str | None = None,
) -> Iterator[OperatorProcess]:
    """`operator` (the worker's session operator) stopped and, in its place, the same operator with `settings` added
    (and on the clock in `clock_file`), logging into `work`, started; `operator` started again afterwards, whatever
    happened, also when the replacement did not start. The same identity, Lease, namespaces and metrics port, so
    what the test reads is the replacement's. `kept_log`: the name its log is kept under with the run's logs.

    The one way a test runs the session's operator reconfigured (an events sink, tracing, a movable clock, the
    archive on): two operators never reconcile the worker's runs at once."""
    operator.stop()
    replacement = replace(operator, settings={**operator.settings, **settings}, log_path=work / "operator.log",
                          process=None, clock_file=clock_file if clock_file is not None else operator.clock_file)
    try:
        yield replacement.start()
    finally:
        replacement.stop()
        if kept_log is not None:
            log = Path(replacement.log_path)
            (kept_logs_root() / kept_log).write_bytes(log.read_bytes() if log.exists() else b"")
        operator.start()


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
