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

With `log_text`, kwok also serves every container's log through the API server (`pods/log`), as a kubelet does:
a `ClusterLogs` rule names one file in the CRI log format, and kwok's kubelet endpoint (its `--server-address`, the
Node's InternalIP and `daemonEndpoints` port) serves it over TLS with a certificate the control plane's CA signed,
which the API server verifies (`--kubelet-certificate-authority`). Without it a pod's log GET fails (kwok's
Node has no kubelet endpoint the API server could reach).

Nothing runs and nothing is routed: the addresses kwok writes into status
exist only there. Never used by the tests (they run on the real node).
"""

from __future__ import annotations

import datetime
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from towline.jsontypes import JSON
from towline_dev.binaries import find_kwok
from towline_dev.certs import issue_leaf, load_ca, write_key_pair
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


def cri_log(text: str, at: datetime.datetime) -> str:
    """`text` as a container runtime writes a log file (CRI format: time, stream, full-line tag, line), which is
    what kwok reads back for `pods/log`."""
    stamp = at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "".join(f"{stamp} stdout F {line}\n" for line in text.splitlines())


def cluster_logs(logs_file: Path) -> JSON:
    """A kwok ClusterLogs rule: every container of every pod on its nodes logs `logs_file`."""
    return {"apiVersion": STAGE_API, "kind": "ClusterLogs", "metadata": {"name": "every-container"},
            "spec": {"logs": [{"logsFile": str(logs_file), "follow": False}]}}


def kwok_config_text(message: str, extra_stages: tuple[JSON, ...] = (), *, logs_file: Path | None = None) -> str:
    """The file kwok's `--config` reads: the pod Stages (node Stages stay kwok's defaults), and with `logs_file` the
    rule that serves it as every container's log."""
    documents = [*pod_stages(message), *extra_stages]
    if logs_file is not None:
        documents.append(cluster_logs(logs_file))
    return yaml.safe_dump_all(documents, sort_keys=False)


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
                 extra_stages: tuple[JSON, ...] = (), log_text: str | None = None) -> None:
        """`log_text`: what every container's log reads (`pods/log`); None: no log is served."""
        self.plane = plane
        self.work = work
        self.extra_stages = extra_stages
        self.log_text = log_text
        self.message = message if message is not None else result_message(SUCCEEDED_RESULT)
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> SimulatedNode:
        self.work.mkdir(parents=True, exist_ok=True)
        config = self.work / "kwok.yaml"
        logs_file = self.work / "container.log" if self.log_text is not None else None
        config.write_text(kwok_config_text(self.message, self.extra_stages, logs_file=logs_file))
        kubeconfig = str(self.plane.kubeconfig)  # admin: kwok writes pod and node status, the scheduler binds
        port = free_loopback_port()
        serving: list[str] = []
        if logs_file is not None:
            logs_file.write_text(cri_log(self.log_text or "", datetime.datetime.now(datetime.UTC)))
            serving = self._kubelet_endpoint(port)
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
                f"--server-address={self.plane.address if serving else '127.0.0.1'}:{port}", *serving,
            ], log_path=self.work / "kwok.log")
            self.plane.kubectl("apply", "-f", "-", stdin=json.dumps(fake_node()))
            wait_for(self._ready, timeout=60, interval=0.2, what=f"the simulated node {NODE_NAME} to be Ready")
        except BaseException:
            self.stop()
            raise
        return self

    def _kubelet_endpoint(self, port: int) -> list[str]:
        """kwok's flags to serve as the Node's kubelet endpoint on the API server's address, with a serving
        certificate of the control plane's CA (the API server verifies the kubelets it calls)."""
        ca_key, ca_cert = load_ca(self.plane.pki_dir)
        key, cert = issue_leaf(datetime.datetime.now(datetime.UTC), ca_key, ca_cert, common_name=NODE_NAME,
                               server_ips=(self.plane.address,))
        cert_file, key_file = self.work / "kubelet-serving.crt", self.work / "kubelet-serving.key"
        write_key_pair(cert_file, key_file, key, cert)
        return [f"--node-ip={self.plane.address}", f"--node-port={port}", f"--tls-cert-file={cert_file}",
                f"--tls-private-key-file={key_file}"]

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
