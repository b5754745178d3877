"""One chaos scenario on the real node: set up, start the runs, disrupt, wait, count.

The control plane must serve a real node with the runner image loaded (`NodeCluster`);
the caller owns it. The scenario installs the CRDs and the chart's RBAC (idempotent),
starts its own operator replicas and the sink, and stops both before it returns, leaving
the control plane and the node running.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.chaos.events import carry_out, plan
from tests.chaos.jobwatch import JobWatch
from tests.chaos.operators import Replicas
from tests.chaos.report import ChaosReport
from towline.engine import TERMINAL_RUN_PHASES
from towline_dev.clients import KubeClients, clients_from_kubeconfig
from towline_dev.controlplane import ControlPlane
from towline_dev.install import (
    OPERATOR_NAMESPACE,
    SERVICE_ACCOUNT,
    install_chart,
    install_crds,
    operator_kubeconfig,
    render_chart,
)
from towline_dev.node.idempotencysink import IdempotencySink
from towline_dev.node.probehosts import ProbeHosts

SINK_ADDRESS = "198.51.100.206"
SINK_PORT = 8080
HOLD_PORT = 9
"""A probe host's listener on the sink's address (TCP discard): it holds the address in the namespace."""
WORKFLOW = "chaos"
GROUP, VERSION = "towline.dev", "v1alpha1"


@dataclass(frozen=True)
class ChaosSettings:
    runs: int
    kills: int
    pauses: int
    seed: int
    apiserver_restarts: int = 1
    etcd_restarts: int = 1
    steps: tuple[str, ...] = ("first", "second")
    """A chain: each step POSTs to the sink with its Idempotency-Key."""
    gaps: tuple[float, float] = (2.0, 8.0)
    """Seconds between one disruption's end and the next one, drawn uniformly."""
    lost_reply_share: float = 0.2
    """Keys whose first reply the sink answers with a 503 after applying (the step must retry)."""
    timeout: float = 2400.0
    """Seconds after the runs were created by which every run must have finished."""
    namespace: str = "towline-chaos"
    shards: int = 1
    """operator.shards: above 1 the replicas share the namespaces' shards, and the chaos hits the holder of the
    runs' shard while the others hold the rest."""
    replicas: int = 2


def chaos_workflow(settings: ChaosSettings) -> dict[str, Any]:
    steps = []
    for index, step_id in enumerate(settings.steps):
        steps.append({
            "id": step_id,
            **({"needs": [settings.steps[index - 1]]} if index else {}),
            "action": "http.request",
            "with": {"url": f"http://{SINK_ADDRESS}:{SINK_PORT}/apply", "method": "POST",
                     "json": {"run": "${{ run.name }}", "step": step_id}},
            "retry": {"limit": 5, "backoff": "fixed", "baseDelaySeconds": 1},
            # The deadline counts from the Job's creation, queueing included: 100 first steps wait for
            # a 2-core node (each pod requests 50m CPU) that runs about 35 at a time, under heavy load.
            "timeoutSeconds": 1800,
            "egress": [{"cidr": f"{SINK_ADDRESS}/32", "ports": [SINK_PORT]}],
            "allowPrivateNetworks": [f"{SINK_ADDRESS}/32"],
            "allowHosts": [SINK_ADDRESS],
        })
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow",
            "metadata": {"name": WORKFLOW, "namespace": settings.namespace},
            # Finished runs (and their Jobs) must stay to be counted.
            "spec": {"steps": steps, "policy": {"history": {"succeeded": 1000, "failed": 1000}}}}


class Progress:
    """Run phases, listed every second by a thread of its own; the disruptions log how many finished."""

    def __init__(self, admin: KubeClients, namespace: str, names: list[str]) -> None:
        self._admin, self._namespace, self._names = admin, namespace, set(names)
        self._finished = 0
        self.all_finished_at: float | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-progress", daemon=True)

    def start(self) -> Progress:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=60)

    def finished(self) -> int:
        return self._finished

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                runs = _list(self._admin, self._namespace, "workflowruns")
            except Exception:  # the API server is restarting; the next poll sees it
                runs = None
            if runs is not None:
                self._finished = sum(1 for r in runs if r["metadata"]["name"] in self._names
                                     and (r.get("status") or {}).get("phase") in TERMINAL_RUN_PHASES)
                if self._finished >= len(self._names) and self.all_finished_at is None:
                    self.all_finished_at = time.monotonic()
            self._stopping.wait(1.0)


def run_chaos(plane: ControlPlane, settings: ChaosSettings, work_dir: Path,
              log: Callable[[str], None] = print) -> ChaosReport:
    """The scenario, with the CRDs and the chart's RBAC and policies applied (kubectl) for it.
    Chart objects it applied are removed afterwards (Helm adopts none of them); the CRDs stay."""
    install_crds(plane)
    present = plane.kubectl("get", "serviceaccount", SERVICE_ACCOUNT, "-n", OPERATOR_NAMESPACE,
                            check=False).returncode == 0
    install_chart(plane)
    try:
        return _run_installed(plane, settings, work_dir, log)
    finally:
        if not present:
            plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=render_chart(plane),
                          timeout=120)


def _run_installed(plane: ControlPlane, settings: ChaosSettings, work_dir: Path,
                   log: Callable[[str], None]) -> ChaosReport:
    admin = clients_from_kubeconfig(plane.kubeconfig, context="admin")
    work_dir.mkdir(parents=True, exist_ok=True)
    _fresh_namespace(admin, settings.namespace)
    hosts = ProbeHosts([f"{SINK_ADDRESS}:{HOLD_PORT}"], work_dir).start()
    lose = settings.lost_reply_share
    sink = IdempotencySink(SINK_ADDRESS, SINK_PORT,
                           lose_first_reply=lambda key: random.Random(f"{settings.seed}:{key}").random() < lose)
    replicas = Replicas(plane, operator_kubeconfig(plane, work_dir / "operator.kubeconfig"), work_dir,
                        count=settings.replicas, shards=settings.shards, namespace=settings.namespace)
    jobs = JobWatch(admin, settings.namespace)
    try:
        sink.start()
        replicas.start()
        jobs.start()
        admin.custom.create_namespaced_custom_object(GROUP, VERSION, settings.namespace, "workflows",
                                                     chaos_workflow(settings))
        disruptions = plan(settings.seed, kills=settings.kills, pauses=settings.pauses,
                           apiserver=settings.apiserver_restarts, etcd=settings.etcd_restarts, gaps=settings.gaps)
        log(f"seed {settings.seed}: {settings.runs} runs x {len(settings.steps)} steps; disruptions in order: "
            + ", ".join(d.kind for d in disruptions))
        started = time.monotonic()
        names = _create_runs(admin, settings)
        progress = Progress(admin, settings.namespace, names).start()
        # Disruptions run on this thread: what they restart (the API server, etcd, an operator) is
        # killed by the kernel when the thread that started it ends (PR_SET_PDEATHSIG).
        happened = carry_out(disruptions, plane, replicas, progress.finished, log, before=replicas.revive_exited)
        while time.monotonic() < started + settings.timeout and progress.finished() < len(names):
            replicas.revive_exited()
            time.sleep(1)
        progress.stop()
        seconds = (progress.all_finished_at or time.monotonic()) - started
        jobs.stop()
        jobs.catch_up()
        runs = _list(admin, settings.namespace, "workflowruns")
        return ChaosReport(
            settings=settings, seconds=seconds, operator_cpu=replicas.cpu_seconds(), happened=happened,
            runs={r["metadata"]["name"]: r for r in runs if r["metadata"]["name"] in names},
            created=len(names), jobs_per_attempt=jobs.jobs_per_attempt(), sink=sink.counts(),
            watch_reconnects=jobs.reconnects, operators_running=replicas.all_running(),
            operator_exits=list(replicas.exits),
        )
    finally:
        jobs.stop()
        replicas.stop()
        sink.stop()
        hosts.stop()
        admin.close()


def _fresh_namespace(admin: KubeClients, namespace: str) -> None:
    try:
        admin.core.delete_namespace(namespace)
    except ApiException as error:
        if error.status != 404:
            raise
    deadline = time.monotonic() + 180
    while True:
        try:
            admin.core.create_namespace({"metadata": {"name": namespace, "labels": {"towline.dev/test": "true"}}})
            return
        except ApiException as error:
            if error.status != 409 or time.monotonic() > deadline:
                raise
            time.sleep(1)  # the previous scenario's namespace is still terminating


def _create_runs(admin: KubeClients, settings: ChaosSettings) -> list[str]:
    names = [f"{WORKFLOW}-{index:03d}" for index in range(1, settings.runs + 1)]
    for name in names:
        admin.custom.create_namespaced_custom_object(GROUP, VERSION, settings.namespace, "workflowruns", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkflowRun",
            "metadata": {"name": name, "namespace": settings.namespace},
            "spec": {"workflowRef": {"name": WORKFLOW}, "requestedBy": "admin"},
        })
    return names


def _list(admin: KubeClients, namespace: str, plural: str) -> list[dict[str, Any]]:
    listing = admin.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural, _request_timeout=20)
    items: list[dict[str, Any]] = listing["items"]
    return items
