"""A simulated node for the scale benchmarks: kube-scheduler and kwok against a local ControlPlane.

kwok (sigs.k8s.io/kwok, the Kubernetes project's own tool for this) plays the
kubelet of one fake Node; the real kube-scheduler binds pods to it and the real
Job controller (in the control plane's controller manager) turns finished pods
into finished Jobs. kwok's own node stages and its node Lease (renewed as a
kubelet's) keep the Node Ready; the pod stages here replace its defaults:

- a scheduled pod starts at once (Running, with an address from kwok's range);
- a running pod owned by a Job terminates at once, exit code 0, with the
  termination message the step runner would have written (`result_message`),
  so the operator reads a step result exactly as from a real pod;
- a deleted pod is gone at once.

Nothing runs and nothing is routed: the addresses kwok writes into status
exist only there. Never used by the tests (they run on the real node).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from towline_dev.binaries import find_kwok
from towline_dev.controlplane import ControlPlane
from towline_dev.processes import free_loopback_port, spawn, stop_process, wait_for
from towline_step.protocol import RESULT_LIMIT_BYTES

NODE_NAME = "kwok-node-0"
NODE_LEASE_SECONDS = 40
MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
STAGE_API = "kwok.x-k8s.io/v1alpha1"

SUCCEEDED_RESULT: dict[str, Any] = {
    "ok": True, "output": {"simulated": True}, "errorClass": None, "message": None,
    "retryable": False, "retryAfterSeconds": None, "usage": None,
}
"""What the runner writes for a step whose action returned `{"simulated": true}`."""

JSON = dict[str, Any]


def result_message(document: Mapping[str, Any]) -> str:
    """The runner's result document as the termination message text, checked to fit and to template safely."""
    text = json.dumps(document, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > RESULT_LIMIT_BYTES:
        raise ValueError(f"the simulated result is {len(text.encode())} bytes; the limit is {RESULT_LIMIT_BYTES}")
    if "{{" in text or "}}" in text:
        # kwok renders stages as Go templates; compact JSON of plain values never contains these.
        raise ValueError("the simulated result must not contain '{{' or '}}' (Go template delimiters)")
    return text


def _pod_stage(name: str, expressions: list[JSON], next_: JSON) -> JSON:
    return {
        "apiVersion": STAGE_API, "kind": "Stage", "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                 "selector": {"matchExpressions": expressions}, "next": next_},
    }


_NOT_DELETED = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}

_READY_TEMPLATE = """{{ $now := Now }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Ready}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: ContainersReady}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""

_COMPLETE_TEMPLATE = """{{ $now := Now }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 0
      reason: Completed
      message: MESSAGE
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: Succeeded
"""


def pod_stages(message: str) -> list[JSON]:
    """kwok Stages: start a scheduled pod, complete a Job's running pod with `message`, delete at once."""
    # A JSON string literal is a valid YAML double-quoted scalar.
    complete = _COMPLETE_TEMPLATE.replace("MESSAGE", json.dumps(message))
    return [
        _pod_stage("pod-ready", [_NOT_DELETED, {"key": ".status.podIP", "operator": "DoesNotExist"}],
                   {"statusTemplate": _READY_TEMPLATE}),
        _pod_stage("pod-complete", [
            _NOT_DELETED,
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]},
        ], {"statusTemplate": complete}),
        _pod_stage("pod-delete", [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
                   {"finalizers": {"empty": True}, "delete": True}),
    ]


def complete_owned_by(api_version: str, kind: str, message: str = "") -> JSON:
    """A Stage completing (exit code 0, `message`) a running pod owned by another kind of controller,
    e.g. Argo Workflows' pods (owned by its Workflow) for the side-by-side benchmark."""
    complete = _COMPLETE_TEMPLATE.replace("MESSAGE", json.dumps(message))
    return _pod_stage(f"pod-complete-{kind.lower()}", [
        _NOT_DELETED,
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": ".metadata.ownerReferences.[].apiVersion", "operator": "In", "values": [api_version]},
        {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": [kind]},
    ], {"statusTemplate": complete})


def kwok_config_text(message: str, extra_stages: tuple[JSON, ...] = ()) -> str:
    """The file kwok's `--config` reads: the pod Stages (node Stages stay kwok's defaults)."""
    return yaml.safe_dump_all([*pod_stages(message), *extra_stages], sort_keys=False)


def fake_node(name: str = NODE_NAME) -> JSON:
    """A Node kwok manages (by annotation), big enough that capacity never limits a benchmark."""
    capacity = {"cpu": "1k", "memory": "1Ti", "pods": "100k"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {MANAGED_ANNOTATION: "fake"},
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"}},
        "status": {"allocatable": capacity, "capacity": capacity},
    }


class SimulatedNode:
    """kube-scheduler plus kwok with one fake Node; `start()` returns once the Node is Ready."""

    def __init__(self, plane: ControlPlane, work: Path, *, message: str | None = None,
                 extra_stages: tuple[JSON, ...] = ()) -> None:
        self.plane = plane
        self.work = work
        self.extra_stages = extra_stages
        self.message = message if message is not None else result_message(SUCCEEDED_RESULT)
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> SimulatedNode:
        self.work.mkdir(parents=True, exist_ok=True)
        config = self.work / "kwok.yaml"
        config.write_text(kwok_config_text(self.message, self.extra_stages))
        kubeconfig = str(self.plane.kubeconfig)  # admin: kwok writes pod and node status, the scheduler binds
        try:
            self._processes["kube-scheduler"] = spawn([
                self.plane.binaries.path("kube-scheduler"), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false", "--secure-port=0", "--kube-api-qps=500", "--kube-api-burst=1000",
            ], log_path=self.work / "kube-scheduler.log")
            self._processes["kwok"] = spawn([
                find_kwok(), f"--kubeconfig={kubeconfig}", f"--config={config}",
                f"--manage-nodes-with-annotation-selector={MANAGED_ANNOTATION}=fake",
                # A Lease renewed every 10 s, as a kubelet's: without one the Node's only heartbeat is kwok's
                # status stage, every 20-45 s, which on two busy cores came later than kube-controller-manager's
                # 50 s grace. The node controller then marked the Node NotReady and rewrote the status of every
                # pod on it, about once a minute, inside whichever engine's batch ran (docs/benchmarks.md).
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
                f"--server-address=127.0.0.1:{free_loopback_port()}",
            ], log_path=self.work / "kwok.log")
            self.plane.kubectl("apply", "-f", "-", stdin=json.dumps(fake_node()))
            wait_for(self._ready, timeout=60, interval=0.2, what=f"the simulated node {NODE_NAME} to be Ready")
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        for name, process in self._processes.items():
            if process.poll() is not None:
                log = (self.work / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with status {process.returncode}:\n{log}")
        status = self.plane.kubectl("get", "node", NODE_NAME, "-o",
                                    "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
        return status.stdout.strip() == "True"

    def stop(self) -> None:
        for name in ("kwok", "kube-scheduler"):
            process = self._processes.pop(name, None)
            if process is not None:
                stop_process(process, grace_seconds=5)

    def __enter__(self) -> SimulatedNode:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
