"""The real node's figures: start time, pod and step-Job start latency, NetworkPolicy lag.

Starts a control plane with a real node (needs root), then reports:
- start: nothing -> control plane up -> node Ready with CoreDNS serving and the volume provisioner running;
- pod start latency: Pod created -> its container running (`PODS` pods, one at a time);
- step start latency: a Job as the operator builds it created -> its container running;
- NetworkPolicy lag: a step pod's container running -> its egress policy in effect
  (a connect to a test host it may not reach no longer arrives).
Prints figures; asserts nothing about time. Run: `python -m tests.bench.bench_node`.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from tests.integration.nodesupport import create, create_step_job, sleeper_pod, tcp_probe
from towline.k8s.labels import LABEL_STEP_POD
from towline.k8s.objects import (
    RunRef,
    StepPodSettings,
    build_default_deny_policy,
    build_step_egress_policy,
    egress_rules,
    step_labels,
)
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.validation.catalog import connector_catalog
from towline_dev.controlplane import ControlPlane
from towline_dev.node.nodeimages import TEST_IMAGE
from towline_dev.node.probehosts import ProbeHosts
from towline_dev.node.realnode import NodeCluster

PODS = 8
NAMESPACE = "bench-node"
FORBIDDEN = "198.51.100.212:8080"


def _running(plane: ControlPlane, namespace: str, name: str) -> bool:
    status, body = plane.api_get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    if status != 200:
        return False
    statuses = json.loads(body).get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in s.get("state", {}) for s in statuses)


def _until(condition: Callable[[], bool], timeout: float = 120) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise TimeoutError("the node did not get there in time")
        time.sleep(0.05)
    return time.monotonic() - started


def _job_pod(plane: ControlPlane, job: str) -> str | None:
    status, body = plane.api_get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=job-name%3D{job}")
    items = json.loads(body).get("items", []) if status == 200 else []
    return str(items[0]["metadata"]["name"]) if items else None


def _figures(label: str, samples: list[float]) -> None:
    print(f"  {label}: median {statistics.median(samples):.2f} s, min {min(samples):.2f} s, "
          f"max {max(samples):.2f} s over {len(samples)}")


def main() -> None:
    if os.geteuid() != 0:
        print("bench_node: skipped (the real node needs root)")
        return
    cluster = NodeCluster(Path(tempfile.mkdtemp(prefix="towline-bench-node-"))).start()
    try:
        plane, node = cluster.plane, cluster.node
        assert plane is not None and node is not None
        print("Real node (kubelet, containerd, CNI bridge, kube-proxy, kube-router, CoreDNS, local-path-provisioner)")
        print(f"  start: control plane {plane.startup_seconds:.1f} s, node Ready with DNS and volumes "
              f"{node.startup_seconds:.1f} s, together {cluster.startup_seconds:.1f} s")
        plane.kubectl("create", "namespace", NAMESPACE)
        pod_latency = []
        for index in range(PODS):
            started = time.monotonic()
            create(plane, sleeper_pod(f"pod-{index}", NAMESPACE))
            _until(lambda i=index: _running(plane, NAMESPACE, f"pod-{i}"))
            pod_latency.append(time.monotonic() - started)
        _figures("Pod created -> container running", pod_latency)

        run = RunRef(name="run", namespace=NAMESPACE, uid="00000000-0000-0000-0000-00000000000b", workflow="wf")
        settings = StepPodSettings(image=TEST_IMAGE, command=("/bin/busybox", "sleep", "600"))
        job_latency = []
        for index in range(PODS):
            job = build_step_job(
                run, BuiltinAction(connector_catalog()), job_name=f"step-{index}", step_id=f"s{index}", attempt=1,
                action="http.request", inputs={}, credentials={}, idempotency_key=str(index), timeout_seconds=600,
                settings=settings, created_at=datetime.now(UTC),
            )
            del job["metadata"]["ownerReferences"]
            started = time.monotonic()
            create_step_job(plane, job)  # the Job and its pod, as the operator makes them
            name = f"step-{index}"
            _until(lambda n=name: _job_pod(plane, n) is not None)
            pod = _job_pod(plane, name)
            assert pod is not None
            _until(lambda p=pod: _running(plane, NAMESPACE, p))
            job_latency.append(time.monotonic() - started)
        _figures("step Job created -> container running", job_latency)

        with ProbeHosts([FORBIDDEN], Path(tempfile.mkdtemp(prefix="towline-bench-hosts-"))) as hosts:
            create(plane, build_default_deny_policy(NAMESPACE))
            lags = []
            for index in range(5):
                name = f"isolated-{index}"
                labels = {**step_labels(run, f"iso{index}"), LABEL_STEP_POD: "true"}
                policy = build_step_egress_policy(run, name=f"egress-{index}", step_id=f"iso{index}",
                                                  rules=egress_rules(egress=[], connector_ports=[]))
                del policy["metadata"]["ownerReferences"]
                create(plane, policy)
                create(plane, sleeper_pod(name, NAMESPACE, labels))
                _until(lambda n=name: _running(plane, NAMESPACE, n))

                def isolated(n: str = name) -> bool:
                    before = hosts.arrived(FORBIDDEN)
                    tcp_probe(plane, NAMESPACE, n, "198.51.100.212", 8080, wait=1)
                    return hosts.arrived(FORBIDDEN) == before

                lags.append(_until(isolated))
            _figures("step container running -> egress policy in effect", lags)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
