"""The benchmarks' cluster: the real local control plane, the chart's RBAC and policies, kwok as the node.

The operator runs as a process with its ServiceAccount's token (the chart's RBAC),
started and stopped by the benchmark so a phase can run without it (the raw-client
limit) and so its memory can be read from /proc. BENCH_OPERATOR_PYTHONPATH runs
another revision's operator (its exported `operator` and `connectors` directories)
against this benchmark, for before/after figures. BENCH_OPERATOR_PROFILE=DIR runs
each operator under cProfile and writes its stats to DIR/operator-N.prof when it
stops (read them with `python -m pstats`).

kube-controller-manager's client is allowed 500 requests per second (burst 1000), as the simulated node's
scheduler is: its Job controller makes every step's pod and writes every step Job's status, and at the dev
cluster's 100 it, not the operator, capped the steps per second (docs/benchmarks.md).
BENCH_CONTROLLER_MANAGER_QPS sets another figure (kube-controller-manager's own default is 20).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.figures import cpu_ticks, rss_kib
from towline_dev.binaries import find_binaries
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess, install_chart, install_crds, operator_kubeconfig
from towline_dev.processes import free_loopback_port
from towline_dev.simnode import SimulatedNode

RUNNER = "carol"
"""Who starts the benchmark's runs (bound to towline-runner in each namespace)."""
CONTROLLER_MANAGER_QPS = int(os.environ.get("BENCH_CONTROLLER_MANAGER_QPS", "500"))
"""kube-controller-manager's `--kube-api-qps` on the benchmarks' cluster (see above)."""


@dataclass
class SimCluster:
    plane: ControlPlane
    work: Path
    operator_kubeconfig: Path
    operators: list[OperatorProcess] = field(default_factory=list)

    def namespace(self, name: str) -> None:
        self.plane.kubectl("create", "namespace", name)
        self.plane.kubectl("create", "rolebinding", "runner", "--clusterrole=towline-runner", f"--user={RUNNER}",
                           "-n", name)

    def drop_namespace(self, name: str) -> None:
        """Delete a namespace and wait until it and everything in it are gone, so the next batch starts on a
        cluster holding nothing of this one (run while its engine still runs: it removes its own finalizers)."""
        self.plane.kubectl("delete", "namespace", name, "--timeout=600s", timeout=660)

    def apply(self, manifest: dict[str, Any]) -> None:
        self.plane.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))

    def start_operator(self, *, namespaces: tuple[str, ...] = (), settings: dict[str, str] | None = None
                       ) -> OperatorProcess:
        settings = dict(settings or {})
        if os.environ.get("BENCH_OPERATOR_PYTHONPATH"):
            # Another revision's operator (e.g. an exported main) against this revision's benchmark.
            settings["PYTHONPATH"] = os.environ["BENCH_OPERATOR_PYTHONPATH"]
        profiles = os.environ.get("BENCH_OPERATOR_PROFILE")
        operator = OperatorProcess(
            kubeconfig=self.operator_kubeconfig, log_path=self.work / f"operator-{len(self.operators)}.log",
            metrics_port=free_loopback_port(), watch_namespaces=namespaces, settings=settings,
            profile_path=Path(profiles) / f"operator-{len(self.operators)}.prof" if profiles else None,
        )
        self.operators.append(operator.start())
        return operator

    def apiserver_metrics(self) -> str:
        return self.plane.api_get("/metrics", timeout=30)[1].decode()


def operator_metrics(operator: OperatorProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10) as response:
        text: str = response.read().decode()
    return text


async def serving(scrape: Callable[[], str], what: str, timeout: float = 180) -> None:
    """Until `what`'s metrics endpoint answers (a loaded machine, or cProfile, starts a process slowly)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            scrape()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


def cpu_seconds(pid: int) -> float:
    """CPU (user + system, all threads) the process has used so far, from /proc/PID/stat."""
    return cpu_ticks(Path(f"/proc/{pid}/stat").read_text()) / os.sysconf("SC_CLK_TCK")


def operator_cpu_seconds(operator: OperatorProcess) -> float:
    assert operator.process is not None
    return cpu_seconds(operator.process.pid)


def operator_rss_kib(operator: OperatorProcess) -> tuple[int, int]:
    """(resident now, peak resident) of the operator process, from /proc."""
    assert operator.process is not None
    return rss_kib(Path(f"/proc/{operator.process.pid}/status").read_text())


@contextmanager
def sim_cluster(*, extra_stages: tuple[dict[str, Any], ...] = (), log_text: str | None = None
                ) -> Iterator[SimCluster]:
    """`extra_stages`: more kwok pod Stages, e.g. completing another engine's pods; `log_text`: what every
    container's log reads through the API server (None: kwok serves no logs)."""
    work = Path(tempfile.mkdtemp(prefix="towline-bench-"))
    plane = ControlPlane(find_binaries(), controller_manager_qps=CONTROLLER_MANAGER_QPS).start()
    node = SimulatedNode(plane, work / "node", extra_stages=extra_stages, log_text=log_text)
    cluster = SimCluster(plane=plane, work=work, operator_kubeconfig=work / "operator.kubeconfig")
    try:
        node.start()
        install_crds(plane)
        install_chart(plane)
        operator_kubeconfig(plane, cluster.operator_kubeconfig)
        yield cluster
    finally:
        for operator in cluster.operators:
            operator.stop()
        node.stop()
        plane.stop()
        plane.remove_state()
