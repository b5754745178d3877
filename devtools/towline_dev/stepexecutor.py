"""The local step executor: the node (and scheduler) of the local control plane.

There is no kubelet and no kube-scheduler here. This executor registers one Node
(`towline-local-node`), keeps it healthy (its Lease in kube-node-lease and its
Ready condition are renewed every 10 s, so the node lifecycle controller never
taints it or evicts its pods), binds pending pods meant for the default scheduler
in the namespaces it serves, and runs each as a local process, writing the pod
status back. The real Job controller in kube-controller-manager then marks Jobs
Complete or Failed, exactly as in a cluster.

What it is NOT — read this before trusting a passing test:

- One container per pod; no init, sidecar or ephemeral containers; no restarts
  (every restartPolicy behaves like Never).
- No images. `command + args` run on this machine with this machine's files, and
  `python3` means the interpreter the executor runs with (its bin directory comes
  first on PATH). `image` is recorded in the status but never pulled.
- Volumes: secret, configMap, downwardAPI, projected (including service account
  tokens from the TokenRequest API) and emptyDir. They are bound at the pod's
  mount paths inside a private mount namespace per process (`podbootstrap`), so
  the host's paths are never written; secret-like volumes are read-only.
  Files live on disk in the executor's work directory (not tmpfs) until the pod ends.
- Users: runAsUser/runAsGroup/fsGroup/supplementalGroups are applied when the
  command is reachable for that uid (directories it may not search on the way
  to the interpreter are veiled so only the needed path shows); otherwise the
  process runs as the executor's user and says so on stderr. runAsNonRoot
  without runAsUser is refused like the kubelet does. readOnlyRootFilesystem
  is enforced (every mount but /proc, /sys, /dev and the pod's writable volumes
  is read-only for the process); allowPrivilegeEscalation: false sets
  no_new_privs. Capabilities beyond what dropping root implies, seccomp,
  AppArmor and SELinux are not applied; a pod without runAsUser runs as root.
- The working directory is the container's workingDir, else a fresh per-pod
  directory (mode 0777) in the work directory; no image WORKDIR exists.
- Environment: the pod's env/envFrom (values, Secret and ConfigMap keys,
  fieldRefs; no resourceFieldRef), $(VAR) expansion, plus PATH, HOME=/,
  HOSTNAME and KUBERNETES_SERVICE_HOST/PORT; no per-Service variables.
- No resource limits, no probes, no lifecycle hooks, no pod network, no Services
  (KUBERNETES_SERVICE_HOST points at the loopback API server). NetworkPolicies
  are stored by the API server but nothing enforces them.
- Logs go to a file per pod (`pod_log_path`); `kubectl logs` does not work
  (there is no kubelet to serve it).
- Termination messages are read and truncated like the kubelet (4096 bytes of
  the file, tail-first; FallbackToLogsOnError: last 80 lines / 2048 bytes).

Runs in a background thread (`StepExecutor.start()`, for pytest) or as a process:
``python -m towline_dev.stepexecutor --kubeconfig PATH --work-dir DIR``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import logging
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlparse

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from towline_dev.clients import KubeClients, clients_from_kubeconfig, raw_json
from towline_dev.podrunner import PodRunner, RunnerContext
from towline_dev.podspec import Pod, is_terminal, should_bind

log = logging.getLogger("towline_dev.stepexecutor")

NODE_NAME = "towline-local-node"
HEARTBEAT_SECONDS = 10
LEASE_SECONDS = 40
WATCH_SECONDS = 60


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 1024**3


def node_manifest(name: str, now: str) -> dict[str, Any]:
    """A Ready node with this machine's CPU and memory as capacity."""
    capacity = {"cpu": str(os.cpu_count() or 1), "memory": str(_memory_bytes()), "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "towline.dev/local-node": "true",
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "conditions": node_conditions(now),
            "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux", "osImage": "local processes",
                "kernelVersion": os.uname().release, "containerRuntimeVersion": "towline-local://1",
                "kubeletVersion": "towline-local", "kubeProxyVersion": "", "machineID": "", "systemUUID": "",
                "bootID": "",
            },
        },
    }


def node_conditions(now: str) -> list[dict[str, str]]:
    fine = [("MemoryPressure", "KubeletHasSufficientMemory"), ("DiskPressure", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "KubeletHasSufficientPID")]
    conditions = [
        {"type": kind, "status": "False", "reason": reason, "lastHeartbeatTime": now, "lastTransitionTime": now,
         "message": "local step executor"}
        for kind, reason in fine
    ]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now,
                       "lastTransitionTime": now, "message": "local step executor is posting ready status"})
    return conditions


class StepExecutor:
    """Plays the node for one control plane. `start()` returns at once; `stop()` kills what runs."""

    def __init__(
        self,
        kubeconfig: Path,
        work_dir: Path | None = None,
        *,
        node_name: str = NODE_NAME,
        namespaces: Iterable[str] | None = None,
    ) -> None:
        self.clients: KubeClients = clients_from_kubeconfig(kubeconfig)
        self.node_name = node_name
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="towline-executor-"))
        self.namespaces = frozenset(namespaces) if namespaces is not None else None
        self._runners: dict[str, PodRunner] = {}
        self._finished: set[str] = set()
        self._first_list = True
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._watch: watch.Watch | None = None
        self._threads: list[threading.Thread] = []
        server = urlparse(self.clients.api_client.configuration.host)
        python_bin = str(Path(sys.executable).parent)
        self._context = RunnerContext(
            core=self.clients.core,
            node_name=node_name,
            pods_dir=self.work_dir / "pods",
            logs_dir=self.work_dir / "logs",
            base_env={
                "PATH": os.pathsep.join([python_bin, os.environ.get("PATH", "/usr/bin:/bin")]),
                "HOME": "/",
                "KUBERNETES_SERVICE_HOST": server.hostname or "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(server.port or 443),
                "KUBERNETES_SERVICE_PORT_HTTPS": str(server.port or 443),
            },
            expose=tuple(sorted({sys.prefix, sys.base_prefix, python_bin, *_import_paths()})),
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> StepExecutor:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._register_node()
        self._renew_lease()
        for target, name in ((self._heartbeat_loop, "node heartbeat"), (self._watch_loop, "pod watch")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            runner.shutdown()
        for thread in self._threads:
            thread.join(timeout=5)
        self.clients.close()

    def __enter__(self) -> StepExecutor:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def request_stop(self) -> None:
        """Ask `run_forever` to return (safe from a signal handler)."""
        self._stopped.set()

    def run_forever(self) -> None:
        self.start()
        try:
            self._stopped.wait()
        finally:
            self.stop()

    # -- introspection for tests ----------------------------------------------------------------

    def pod_log_path(self, namespace: str, name: str) -> Path:
        """stdout+stderr of the pod's process (`kubectl logs` has no kubelet to ask)."""
        return self._context.logs_dir / namespace / f"{name}.log"

    def running_pids(self) -> dict[str, int]:
        with self._lock:
            return {f"{r.namespace}/{r.name}": r.pid for r in self._runners.values() if r.pid is not None}

    # -- node ---------------------------------------------------------------------------------

    def _register_node(self) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        manifest: Any = node_manifest(self.node_name, now)
        try:
            self.clients.core.create_node(manifest)
        except ApiException as error:
            if error.status != 409:
                raise
            self.clients.core.patch_node_status(self.node_name, {"status": manifest["status"]})

    def _renew_lease(self) -> None:
        body: Any = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.node_name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": self.node_name, "leaseDurationSeconds": LEASE_SECONDS,
                     "renewTime": _micro_time()},
        }
        api = self.clients.coordination
        try:
            api.patch_namespaced_lease(self.node_name, "kube-node-lease", {"spec": body["spec"]})
        except ApiException as error:
            if error.status != 404:
                raise
            api.create_namespaced_lease("kube-node-lease", body)

    def _heartbeat_loop(self) -> None:
        while not self._stopped.wait(HEARTBEAT_SECONDS):
            try:
                self._renew_lease()
                now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                self.clients.core.patch_node_status(self.node_name, {"status": {"conditions": node_conditions(now)}})
            except Exception:
                log.exception("node heartbeat failed; retrying in %s s", HEARTBEAT_SECONDS)

    # -- pods ---------------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                version = self._relist()
                while not self._stopped.is_set():
                    version = self._watch_from(version)
            except ApiException as error:
                if error.status != 410:
                    log.warning("pod watch failed (%s); relisting", error.reason)
                    self._stopped.wait(1)
            except Exception:
                if self._stopped.is_set():
                    return
                log.exception("pod watch failed; relisting")
                self._stopped.wait(1)

    def _relist(self) -> str:
        listing = self.clients.core.list_pod_for_all_namespaces(_preload_content=False)
        document = raw_json(listing)
        seen: set[str] = set()
        for pod in document.get("items", []):
            seen.add(pod["metadata"]["uid"])
            self._handle(pod, deleted=False, relisting=True)
        with self._lock:
            vanished = [runner for uid, runner in self._runners.items() if uid not in seen]
        for runner in vanished:
            runner.pod_deleted(None)
        self._first_list = False
        return str(document["metadata"]["resourceVersion"])

    def _watch_from(self, version: str) -> str:
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        stream = self._watch.stream(  # type: ignore[no-untyped-call]
            self.clients.core.list_pod_for_all_namespaces, resource_version=version,
            timeout_seconds=WATCH_SECONDS, allow_watch_bookmarks=True,
        )
        for event in stream:
            pod = event["raw_object"]
            version = pod.get("metadata", {}).get("resourceVersion", version)
            if event["type"] != "BOOKMARK":
                self._handle(pod, deleted=event["type"] == "DELETED")
        return version

    def _handle(self, pod: Pod, *, deleted: bool, relisting: bool = False) -> None:
        metadata = pod["metadata"]
        uid = metadata["uid"]
        node = pod.get("spec", {}).get("nodeName")
        with self._lock:
            runner = self._runners.get(uid)
            finished = uid in self._finished
        if runner is not None:
            if deleted:
                runner.pod_deleted(None)
            elif metadata.get("deletionTimestamp"):
                runner.pod_deleted(pod)
            return
        if deleted or self._stopped.is_set():
            return
        if node == self.node_name:
            phase = (pod.get("status") or {}).get("phase", "Pending")
            if metadata.get("deletionTimestamp"):
                self._delete_now(pod)  # nothing runs for it here (any more)
            elif finished or is_terminal(pod):
                return  # late events about a pod this executor already ran
            elif phase == "Pending":
                self._run(pod)
            elif relisting and self._first_list:
                self._fail_lost(pod)
        elif not node and should_bind(pod, self.namespaces):
            self._bind(pod)

    def _bind(self, pod: Pod) -> None:
        metadata = pod["metadata"]
        body: Any = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name},
        }
        try:
            # Raw response: the binding endpoint answers with a Status the model cannot parse.
            self.clients.core.create_namespaced_pod_binding(
                metadata["name"], metadata["namespace"], body, _preload_content=False
            )
            log.info("bound pod %s/%s to %s", metadata["namespace"], metadata["name"], self.node_name)
        except ApiException as error:
            if error.status not in (404, 409):
                log.warning("binding %s/%s failed: %s", metadata["namespace"], metadata["name"], error.reason)

    def _run(self, pod: Pod) -> None:
        runner = PodRunner(pod, self._context, self._runner_finished)
        with self._lock:
            if pod["metadata"]["uid"] in self._runners:
                return
            self._runners[runner.uid] = runner
        runner.start()

    def _runner_finished(self, uid: str) -> None:
        with self._lock:
            self._runners.pop(uid, None)
            self._finished.add(uid)

    def _fail_lost(self, pod: Pod) -> None:
        """A Running pod of this node without a process (the executor restarted): it is lost."""
        metadata = pod["metadata"]
        status = {"phase": "Failed", "reason": "NodeLost", "message": "the local step executor restarted"}
        try:
            self.clients.core.patch_namespaced_pod_status(metadata["name"], metadata["namespace"], {"status": status})
        except ApiException as error:
            log.warning("marking %s/%s lost failed: %s", metadata["namespace"], metadata["name"], error.reason)

    def _delete_now(self, pod: Pod) -> None:
        metadata = pod["metadata"]
        try:
            self.clients.core.delete_namespaced_pod(
                metadata["name"], metadata["namespace"], grace_period_seconds=0,
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=metadata["uid"])
                ),
            )
        except ApiException as error:
            if error.status not in (404, 409):
                log.warning("deleting %s/%s failed: %s", metadata["namespace"], metadata["name"], error.reason)


def _import_paths() -> list[str]:
    """sys.path, plus the source roots of the Towline packages (an editable install maps
    them through an import hook, so they are not on sys.path)."""
    roots = []
    for package in ("towline", "towline_connectors"):
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            roots.append(os.path.dirname(os.path.abspath(location)))
    return [path for path in [*sys.path, *roots] if os.path.isabs(path) and os.path.exists(path)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m towline_dev.stepexecutor", description="The local node for a local control plane."
    )
    parser.add_argument("--kubeconfig", type=Path, required=True, help="identity with rights to bind pods")
    parser.add_argument("--work-dir", type=Path, default=None, help="pod files and logs (default: a temp dir)")
    parser.add_argument("--node-name", default=NODE_NAME)
    parser.add_argument("--namespace", action="append", dest="namespaces", help="serve only these (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s: %(message)s")
    executor = StepExecutor(args.kubeconfig, args.work_dir, node_name=args.node_name, namespaces=args.namespaces)

    def handle(signum: int, frame: FrameType | None) -> None:
        executor.request_stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    log.info("step executor for node %s; pod files and logs in %s", args.node_name, executor.work_dir)
    executor.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
