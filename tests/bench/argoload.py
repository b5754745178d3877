"""Argo Workflows beside Towline on the benchmarks' cluster: its controller, its workflows, its wait container.

The `workflow-controller` of the pinned release (towline_dev.argoworkflows) runs as a
process with a ServiceAccount's token, as in a cluster (and as the operator runs):
the API server's priority and fairness then puts both engines' requests in the same
flow, `service-accounts` (the admin kubeconfig is `system:masters`, exempt from it:
on a saturated API server Argo's requests skipped the queue Towline's waited in).
It is namespaced to the scenario's namespace as the operator is. kwok completes its
pods (a Stage for pods owned by an Argo Workflow); no wait container runs under
kwok, so `report_outputs` plays it: when a workflow pod reaches Succeeded it creates
the WorkflowTaskResult the wait container would have written (no outputs), which
Argo waits for before it marks the node done. Those creates are requests the real
wait container makes too.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.figures import rss_kib
from tests.bench.scaleload import TERMINAL, Shape, watch
from tests.bench.simcluster import cpu_seconds
from towline.jsontypes import JSON
from towline.k8s.client import PODS, KubeApi, Resource
from towline_dev.argoworkflows import argo_crds, find_workflow_controller
from towline_dev.controlplane import ControlPlane
from towline_dev.install import operator_kubeconfig
from towline_dev.processes import free_loopback_port, spawn

ARGO_NAMESPACE = "argo"
ARGO_SERVICE_ACCOUNT = "argo-workflow-controller"
ARGO_WORKFLOWS = Resource("argoproj.io", "v1alpha1", "workflows")
TASK_RESULTS = Resource("argoproj.io", "v1alpha1", "workflowtaskresults")
LABEL_WORKFLOW = "workflows.argoproj.io/workflow"
ANNOTATION_NODE_ID = "workflows.argoproj.io/node-id"


@dataclass(frozen=True)
class ArgoSettings:
    env: dict[str, str]
    flags: tuple[str, ...]


DEFAULT = ArgoSettings({}, ())
"""The controller as released: a workflow requeued every 10 s, 32 workflow workers, its client at 20 QPS (burst 30)."""
TUNED = ArgoSettings({"DEFAULT_REQUEUE_TIME": "1s"}, ("--workflow-workers=32", "--qps=500", "--burst=1000"))
"""Requeue after 1 s and a client limit as high as the simulated node's scheduler has (500 QPS, burst 1000)."""


def install_argo(plane: ControlPlane) -> None:
    """The release's CRDs, the controller's namespace and its ServiceAccount (bound to cluster-admin: what it may
    do matters not here, only that its requests are classified as a ServiceAccount's, as the operator's are)."""
    for crd in argo_crds():
        plane.kubectl("apply", "--server-side", "-f", str(crd))
    plane.kubectl("create", "namespace", ARGO_NAMESPACE)
    plane.kubectl("create", "serviceaccount", ARGO_SERVICE_ACCOUNT, "-n", ARGO_NAMESPACE)
    plane.kubectl("create", "clusterrolebinding", ARGO_SERVICE_ACCOUNT, "--clusterrole=cluster-admin",
                  f"--serviceaccount={ARGO_NAMESPACE}:{ARGO_SERVICE_ACCOUNT}")


def argo_workflow(shape: Shape, namespace: str, name: str) -> JSON:
    """The shape as an Argo DAG whose every task is the same container template (one pod per step)."""
    needs = shape.needs()
    tasks = []
    for level in shape.levels:
        for step in level:
            task: JSON = {"name": step, "template": "step"}
            if needs[step]:
                task["dependencies"] = list(needs[step])
            tasks.append(task)
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "entrypoint": "dag",
            "templates": [
                {"name": "dag", "dag": {"tasks": tasks}},
                {"name": "step", "container": {"image": "registry.invalid/step:1", "command": ["true"]}},
            ],
        },
    }


@dataclass
class ArgoController:
    """One workflow-controller process: started per configuration, SIGKILLed after (it ignores SIGTERM)."""

    plane: ControlPlane
    work: Path
    managed_namespace: str
    settings: ArgoSettings
    metrics_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> ArgoController:
        self.metrics_port = free_loopback_port()
        # Plain HTTP metrics on a free port (the release serves TLS on 9090 by default).
        config = f"secure: false\nport: {self.metrics_port}\npath: /metrics\n"
        self.plane.kubectl("delete", "configmap", "-n", ARGO_NAMESPACE, "workflow-controller-configmap",
                           "--ignore-not-found")
        self.plane.kubectl("create", "configmap", "-n", ARGO_NAMESPACE, "workflow-controller-configmap",
                           f"--from-literal=metricsConfig={config}")
        # One identity for every start: a new process re-takes the SIGKILLed one's Lease at once.
        env = dict(os.environ, LEADER_ELECTION_IDENTITY="bench-workflow-controller", **self.settings.env)
        kubeconfig = operator_kubeconfig(self.plane, self.work / "workflow-controller.kubeconfig",
                                         namespace=ARGO_NAMESPACE, service_account=ARGO_SERVICE_ACCOUNT)
        self.process = spawn([
            find_workflow_controller(), f"--kubeconfig={kubeconfig}", f"--namespace={ARGO_NAMESPACE}",
            "--namespaced", f"--managed-namespace={self.managed_namespace}",
            "--loglevel=warn", *self.settings.flags,
        ], log_path=self.log_path, env=env)
        return self

    async def ready(self, metric: str, timeout: float = 180) -> None:
        """Leading and running: its metrics server (the real one, started once it leads) shows `metric`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"workflow-controller exited ({self.process.returncode}); see {self.log_path}")
            try:
                if metric in self.metrics():
                    return
            except OSError:
                pass
            await asyncio.sleep(0.5)
        raise RuntimeError(f"workflow-controller served no {metric} in {timeout:.0f} s; see {self.log_path}")

    @property
    def log_path(self) -> Path:
        return self.work / f"workflow-controller-{self.managed_namespace}.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def rss_kib(self) -> tuple[int, int]:
        return rss_kib(Path(f"/proc/{self.pid}/status").read_text())

    def metrics(self) -> str:
        import urllib.request  # noqa: PLC0415 - only here

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            text: str = response.read().decode()
        return text

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


@dataclass
class ArgoObservations:
    expected: int
    created: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    phase: dict[str, str] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def saw_workflow(self, workflow: JSON) -> None:
        name = workflow["metadata"]["name"]
        phase = (workflow.get("status") or {}).get("phase") or "Pending"
        self.phase[name] = "Succeeded" if phase == "Succeeded" else phase
        if phase in TERMINAL | {"Error"} and name not in self.finished:
            self.finished[name] = time.monotonic()
            if len(self.finished) >= self.expected:
                self.done.set()


@asynccontextmanager
async def report_outputs(api: KubeApi, namespace: str, seen: ArgoObservations) -> AsyncIterator[None]:
    """Watch workflows (into `seen`) and play the wait container of every pod that succeeds."""
    stop = asyncio.Event()
    reported: set[str] = set()
    pending: set[asyncio.Task[Any]] = set()

    async def write(pod: JSON) -> None:
        meta = pod["metadata"]
        node_id = (meta.get("annotations") or {})[ANNOTATION_NODE_ID]
        await api.create(TASK_RESULTS.path(namespace), {
            "apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTaskResult",
            "metadata": {
                "name": node_id, "namespace": namespace,
                "labels": {LABEL_WORKFLOW: meta["labels"][LABEL_WORKFLOW],
                           "workflows.argoproj.io/report-outputs-completed": "true"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}],
            },
        })

    def saw_pod(pod: JSON) -> None:
        meta = pod["metadata"]
        if (pod.get("status") or {}).get("phase") != "Succeeded" or meta["name"] in reported:
            return
        if LABEL_WORKFLOW not in (meta.get("labels") or {}):
            return
        reported.add(meta["name"])
        task = asyncio.create_task(write(pod))
        pending.add(task)
        task.add_done_callback(pending.discard)

    tasks = [asyncio.create_task(watch(api, PODS.path(namespace), saw_pod, stop)),
             asyncio.create_task(watch(api, ARGO_WORKFLOWS.path(namespace), seen.saw_workflow, stop))]
    await asyncio.sleep(0.5)  # the watches are open before anything is created
    try:
        yield
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *pending, return_exceptions=True)


async def create_workflows(api: KubeApi, manifests: list[JSON], seen: ArgoObservations, parallel: int = 16) -> None:
    """Create the workflows `parallel` at a time, as the Towline side creates its runs."""
    gate = asyncio.Semaphore(parallel)

    async def one(manifest: JSON) -> None:
        async with gate:
            await api.create(ARGO_WORKFLOWS.path(manifest["metadata"]["namespace"]), manifest)
            seen.created[manifest["metadata"]["name"]] = time.monotonic()

    await asyncio.gather(*(one(m) for m in manifests))
