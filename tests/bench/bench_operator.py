"""Operator cost on the real local control plane: API requests per step and step-to-step latency.

Runs a linear workflow of `STEPS` data.transform steps once, then reports:
- the API server's own `apiserver_request_total` delta over the run, by resource, and per step;
- the operator's own request counter (`towline_api_requests_total`) per step;
- the latency from one Job completing (seen on a watch) to the next Job being created.
Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import watch
from urllib3.exceptions import ProtocolError

from towline_dev.binaries import find_binaries
from towline_dev.clients import clients_from_kubeconfig
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess, install_chart, install_crds, operator_kubeconfig
from towline_dev.processes import free_loopback_port
from towline_dev.stepexecutor import StepExecutor

STEPS = 8
NAMESPACE = "bench"
_SAMPLE = re.compile(r'^(\w+)\{([^}]*)\} ([0-9.e+]+)$')


def _requests_by_resource(metrics_text: str, metric: str, label: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in metrics_text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match.group(1) != metric:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        key = labels.get(label, "?")
        if labels.get("subresource"):
            key += "/" + labels["subresource"]
        counts[key] += int(float(match.group(3)))
    return counts


def _workflow() -> dict[str, Any]:
    steps = []
    for index in range(STEPS):
        step: dict[str, Any] = {"id": f"s{index}", "action": "data.transform",
                                "with": {"data": {"i": index}, "fields": {"next": "data.i + 1"}}}
        if index:
            step["needs"] = [f"s{index - 1}"]
        steps.append(step)
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "chain", "namespace": NAMESPACE}, "spec": {"steps": steps}}


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="towline-bench-"))
    plane = ControlPlane(find_binaries()).start()
    executor = StepExecutor(plane.executor_kubeconfig, plane.state_dir / "executor").start()
    metrics_port = free_loopback_port()
    operator = OperatorProcess(
        kubeconfig=Path(), log_path=work / "operator.log", metrics_port=metrics_port
    )
    try:
        install_crds(plane)
        install_chart(plane)
        operator.kubeconfig = operator_kubeconfig(plane, work / "operator.kubeconfig")
        operator.start()
        plane.kubectl("create", "namespace", NAMESPACE)
        plane.kubectl("create", "rolebinding", "runner", "--clusterrole=towline-runner", "--user=carol",
                      "-n", NAMESPACE)
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(_workflow()))
        time.sleep(3)  # let the operator settle on the Workflow before measuring

        created: dict[str, float] = {}
        completed: dict[str, float] = {}
        stop = threading.Event()
        clients = clients_from_kubeconfig(plane.kubeconfig)

        def watch_jobs() -> None:
            stream = watch.Watch()
            with contextlib.suppress(ProtocolError):  # the control plane stops under the watch at the end
                _record(stream)

        def _record(stream: watch.Watch) -> None:
            for event in stream.stream(clients.batch.list_namespaced_job, NAMESPACE, timeout_seconds=300):
                job = event["object"]
                step = job.metadata.annotations.get("towline.dev/step-id")
                created.setdefault(step, time.monotonic())
                if any(c.type == "Complete" and c.status == "True" for c in (job.status.conditions or [])):
                    completed.setdefault(step, time.monotonic())
                if stop.is_set():
                    stream.stop()

        watcher = threading.Thread(target=watch_jobs, daemon=True)
        watcher.start()
        before = plane.api_get("/metrics")[1].decode()
        operator_before = _operator_metrics(metrics_port)
        started = time.monotonic()
        run = {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
               "metadata": {"name": "chain-1", "namespace": NAMESPACE},
               "spec": {"workflowRef": {"name": "chain"}, "requestedBy": "carol"}}
        plane.kubectl("create", "-f", "-", stdin=json.dumps(run), user="carol")
        while True:
            phase = plane.kubectl("get", "workflowrun", "chain-1", "-n", NAMESPACE,
                                  "-o", "jsonpath={.status.phase}").stdout
            if phase in {"Succeeded", "Failed"}:
                break
            if time.monotonic() - started > 300:
                sys.exit("the benchmark run did not finish in 300 s")
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        time.sleep(2)  # the last status write and history pass land
        after = plane.api_get("/metrics")[1].decode()
        operator_after = _operator_metrics(metrics_port)
        stop.set()

        server = _requests_by_resource(after, "apiserver_request_total", "resource") - _requests_by_resource(
            before, "apiserver_request_total", "resource")
        mine = operator_after - operator_before
        gaps = [created[f"s{i + 1}"] - completed[f"s{i}"] for i in range(STEPS - 1)
                if f"s{i}" in completed and f"s{i + 1}" in created]
        print(f"operator bench: {STEPS}-step linear run {phase} in {elapsed:.1f} s")
        print(f"  API server requests during the run (all clients): {sum(server.values())} "
              f"= {sum(server.values()) / STEPS:.1f} per step")
        for resource, count in server.most_common(12):
            print(f"    {resource:32} {count}")
        print(f"  operator's own API requests: {sum(mine.values())} = {sum(mine.values()) / STEPS:.1f} per step")
        for resource, count in mine.most_common(12):
            print(f"    {resource:32} {count}")
        if gaps:
            print(f"  Job complete -> next Job created: median {statistics.median(gaps) * 1000:.0f} ms, "
                  f"max {max(gaps) * 1000:.0f} ms (n={len(gaps)})")
    finally:
        operator.stop()
        executor.stop()
        plane.stop()
        plane.remove_state()


def _operator_metrics(port: int) -> Counter[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return _requests_by_resource(text, "towline_api_requests_total", "resource")


if __name__ == "__main__":
    main()
