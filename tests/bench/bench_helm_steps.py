"""Step start latency through the Helm-installed operator on the real node.

Starts a control plane with a real node (needs root), loads the operator, runner and
example step-type images, `helm install`s the chart (operator x2, ingress x2, as real
containers, code steps enabled), then runs a workflow of `STEPS` chained `data.transform` steps
(a built-in), one of `STEPS` chained `steptype/tcp-probe` steps (the Go example: the runner's
`prepare` init container, then the user's container), one of `code.python` steps and one of
`code.wasm` steps (a small WAT module from a ConfigMap), and, polling the API server every
`POLL` s, reports per step:
- Job created (first seen) -> its (user's) container running (or already finished);
- its container running -> the operator has read the runner's result (step Succeeded
  in the run's status);
- Job created -> step Succeeded.
Figures are at the polling resolution. Prints figures; asserts nothing about time.
Run: `python -m tests.bench.bench_helm_steps`.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import wasmtime

from tests.integration.helm.release import install, uninstall
from tests.integration.support import bind_role, start_run
from towline.k8s.labels import LABEL_STEP
from towline_dev.controlplane import ControlPlane
from towline_dev.images import ensure_images
from towline_dev.node.realnode import NodeCluster
from towline_dev.release import NAMESPACE, RELEASE, api_server_egress, example_step_type_values, wait_rolled_out

STEPS = 12
POLL = 0.1
BENCH_NAMESPACE = "bench-steps"


BUILT_IN = ("latency", "data.transform", {"data": {"n": 1}, "fields": {"n": "data.n + 1"}})
STEP_TYPE = ("latency-type", "steptype/tcp-probe", {"message": "m"})
CODE_PYTHON = ("latency-python", "code.python",
               {"source": "def main(inputs):\n    return {'n': inputs['n'] + 1}\n", "inputs": {"n": 1}})
CODE_WASM = ("latency-wasm", "code.wasm", {"module": {"configMap": {"name": "bench-modules", "key": "greet"}}})
GREET_WAT = Path(__file__).parents[1] / "fixtures" / "wasm" / "greet.wat"
PROBE_TYPE = Path(__file__).parents[2] / "examples" / "step-types" / "tcp-probe-go" / "steptype.yaml"


def _workflow(name: str, action: str, inputs: dict[str, Any]) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for index in range(STEPS):
        step: dict[str, Any] = {"id": f"s{index}", "action": action, "with": inputs}
        if index:
            step["needs"] = [f"s{index - 1}"]
        steps.append(step)
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": BENCH_NAMESPACE}, "spec": {"steps": steps}}


def _get(plane: ControlPlane, path: str) -> dict[str, Any]:
    status, body = plane.api_get(path)
    found: dict[str, Any] = json.loads(body) if status == 200 else {}
    return found


def _observe(plane: ControlPlane, run: str) -> dict[str, dict[str, float]]:
    """First time each step's Job, running container and recorded result were seen."""
    seen: dict[str, dict[str, float]] = {}
    base = f"/apis/towline.dev/v1alpha1/namespaces/{BENCH_NAMESPACE}/workflowruns/{run}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        now = time.monotonic()
        selector = f"?labelSelector=towline.dev/run%3D{run}"
        jobs = _get(plane, f"/apis/batch/v1/namespaces/{BENCH_NAMESPACE}/jobs{selector}").get("items", [])
        for job in jobs:
            step = job["metadata"]["labels"][LABEL_STEP]
            seen.setdefault(step, {}).setdefault("job", now)
        for pod in _get(plane, f"/api/v1/namespaces/{BENCH_NAMESPACE}/pods{selector}").get("items", []):
            states = [s.get("state", {}) for s in pod.get("status", {}).get("containerStatuses") or []]
            if states and all("running" in s or "terminated" in s for s in states):
                seen.setdefault(pod["metadata"]["labels"][LABEL_STEP], {}).setdefault("running", now)
        status = _get(plane, base).get("status") or {}
        for step in status.get("steps", []):
            if step.get("phase") == "Succeeded":
                seen.setdefault(step["id"], {}).setdefault("result", now)
        if status.get("phase") in {"Succeeded", "Failed"}:
            if status["phase"] != "Succeeded":
                raise RuntimeError(f"the run failed: {status}")
            return seen
        time.sleep(POLL)
    raise TimeoutError("the run did not finish in 600 s")


def _figures(label: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(f"  {label}: median {statistics.median(ordered):.2f} s, p95 {p95:.2f} s, "
          f"min {ordered[0]:.2f} s, max {ordered[-1]:.2f} s over {len(ordered)}")


def main() -> None:
    if os.geteuid() != 0:
        print("bench_helm_steps: skipped (the real node needs root)")
        return
    archives = ensure_images(print)
    cluster = NodeCluster(Path(tempfile.mkdtemp(prefix="towline-bench-helm-"))).start(images=list(archives.values()))
    try:
        plane = cluster.plane
        assert plane is not None
        started = time.monotonic()
        plane.kubectl("create", "namespace", NAMESPACE)
        plane.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")
        install(plane, RELEASE, NAMESPACE, {**api_server_egress(plane), **example_step_type_values(),
                                            "codeSteps.enabled": "true"})
        wait_rolled_out(plane)
        print("Helm-installed operator on the real node")
        print(f"  helm install -> operator and ingress Deployments rolled out: {time.monotonic() - started:.1f} s")
        plane.kubectl("create", "namespace", BENCH_NAMESPACE)
        bind_role(plane, BENCH_NAMESPACE, "towline-runner", users=("carol",))
        plane.kubectl("apply", "-n", BENCH_NAMESPACE, "-f", str(PROBE_TYPE))
        module = base64.b64encode(bytes(wasmtime.wat2wasm(GREET_WAT.read_text()))).decode()
        plane.kubectl("apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bench-modules", "namespace": BENCH_NAMESPACE}, "binaryData": {"greet": module}}))
        for name, action, inputs in (BUILT_IN, STEP_TYPE, CODE_PYTHON, CODE_WASM):
            plane.kubectl("apply", "-f", "-", stdin=json.dumps(_workflow(name, action, inputs)))
            plane.kubectl("wait", "-n", BENCH_NAMESPACE, f"workflow/{name}", "--for=condition=Ready", "--timeout=60s")
            run = start_run(plane, BENCH_NAMESPACE, name, name=f"{name}-1", user="carol")
            seen = _observe(plane, run)
            complete = [times for times in seen.values() if {"job", "running", "result"} <= set(times)]
            print(f"  {len(complete)} chained {action} steps, polled every {POLL} s:")
            _figures("Job created -> (user's) container running", [t["running"] - t["job"] for t in complete])
            _figures("container running -> result read by the operator",
                     [t["result"] - t["running"] for t in complete])
            _figures("Job created -> step Succeeded", [t["result"] - t["job"] for t in complete])
        uninstall(plane, RELEASE, NAMESPACE)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
