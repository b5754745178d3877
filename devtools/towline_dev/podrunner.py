"""Run one bound pod as a local process and report its life back to the API server.

One `PodRunner` per pod, on its own thread: it resolves the environment and
volumes (waiting, like the kubelet, while a referenced Secret or ConfigMap is
missing), starts `podbootstrap` in a new session, writes Pending -> Running ->
Succeeded/Failed with kubelet-shaped container statuses and conditions, enforces
`activeDeadlineSeconds`, stops the process when the pod is deleted (SIGTERM, then
SIGKILL after the grace period) and finally deletes a terminating pod with grace 0.

The thread that starts the process also waits for it: the process's
PR_SET_PDEATHSIG is tied to this thread, so it must outlive the process.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from towline_dev import podbootstrap
from towline_dev.podspec import (
    DEADLINE_MESSAGE,
    Pod,
    PodConfigError,
    command_line,
    container_env,
    deletion_grace_seconds,
    exit_reason,
    returncode_to_exit_code,
    rfc3339,
    running_status,
    terminated_status,
    termination_message,
    waiting_status,
)
from towline_dev.podvolumes import ObjectReader, prepare_mounts, remove_volumes

log = logging.getLogger("towline_dev.stepexecutor")

BOOTSTRAP = Path(podbootstrap.__file__)
CONFIG_RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class RunnerContext:
    """What every runner of one executor shares."""

    core: client.CoreV1Api
    node_name: str
    pods_dir: Path
    logs_dir: Path
    base_env: Mapping[str, str]
    expose: tuple[str, ...]
    """Paths a non-root pod user must be able to reach: the interpreter and its packages."""


@dataclass
class _Outcome:
    exit_code: int
    reason: str
    message: str
    pod_reason: str | None = None


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _process_identity(pod: Pod, container: Mapping[str, Any]) -> dict[str, Any]:
    """uid/gid/groups/no-new-privileges from the pod and container security contexts."""
    pod_security = pod["spec"].get("securityContext") or {}
    security = {**pod_security, **(container.get("securityContext") or {})}
    uid = security.get("runAsUser")
    name = f'{pod["metadata"]["name"]}_{pod["metadata"]["namespace"]}({pod["metadata"]["uid"]})'
    if security.get("runAsNonRoot"):
        effective = os.getuid() if uid is None else uid
        if uid is None and effective == 0:
            raise PodConfigError(
                "CreateContainerConfigError",
                f'container has runAsNonRoot and image will run as root (pod: "{name}", '
                f"container: {container['name']}); set runAsUser, there is no image user here",
            )
        if uid == 0:
            raise PodConfigError(
                "CreateContainerConfigError",
                f"container's runAsUser breaks non-root policy (pod: \"{name}\", container: {container['name']})",
            )
    groups = [*pod_security.get("supplementalGroups", [])]
    if pod_security.get("fsGroup") is not None:
        groups.append(pod_security["fsGroup"])
    return {
        "uid": uid,
        "gid": security.get("runAsGroup"),
        "groups": groups,
        "noNewPrivileges": security.get("allowPrivilegeEscalation") is False,
        "readOnlyRootFilesystem": bool((container.get("securityContext") or {}).get("readOnlyRootFilesystem")),
    }


class PodRunner:
    def __init__(self, pod: Pod, context: RunnerContext, on_finished: Callable[[str], None]) -> None:
        metadata = pod["metadata"]
        self.uid: str = metadata["uid"]
        self.namespace: str = metadata["namespace"]
        self.name: str = metadata["name"]
        self._pod = pod
        self._context = context
        self._on_finished = on_finished
        self._deleted = threading.Event()
        self._shutdown = threading.Event()
        self._grace_seconds = 30
        self._process: subprocess.Popen[bytes] | None = None
        self.pod_dir = context.pods_dir / f"{self.namespace}_{self.name}_{self.uid}"
        self.log_path = context.logs_dir / self.namespace / f"{self.name}.log"
        self._thread = threading.Thread(target=self._run, name=f"pod {self.namespace}/{self.name}", daemon=True)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self._thread.start()

    def pod_deleted(self, pod: Pod | None) -> None:
        """The pod got a deletionTimestamp (or vanished): stop the process within the grace period."""
        if pod is not None:
            self._grace_seconds = deletion_grace_seconds(pod)
        else:
            self._grace_seconds = 0
        self._deleted.set()

    def shutdown(self, timeout: float = 10.0) -> None:
        """The executor is stopping: kill the process, write nothing more."""
        self._shutdown.set()
        self._thread.join(timeout)

    # -- the pod's life -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._live()
        except Exception:
            log.exception("pod %s/%s: the local node failed to run it", self.namespace, self.name)
        finally:
            remove_volumes(self.pod_dir)
            self._on_finished(self.uid)

    def _live(self) -> None:
        spec = self._pod["spec"]
        containers = spec.get("containers") or []
        container = containers[0]
        status = self._pod.get("status") or {}
        started = status.get("startTime") or rfc3339(_now())
        start_moment = datetime.datetime.fromisoformat(started.replace("Z", "+00:00"))
        deadline_seconds = spec.get("activeDeadlineSeconds")
        deadline = start_moment.timestamp() + deadline_seconds if deadline_seconds is not None else None
        self._patch_status(waiting_status(container, now=started, start_time=started, reason="ContainerCreating"))

        unsupported = self._unsupported(spec)
        launched: tuple[subprocess.Popen[bytes], Path] | None = None
        outcome: _Outcome | None = None
        last_problem = ""
        while launched is None and outcome is None:
            if self._shutdown.is_set():
                return
            if self._deleted.is_set():
                self._finish_deleted()
                return
            if deadline is not None and time.time() >= deadline:
                outcome = _Outcome(137, "Error", "", pod_reason="DeadlineExceeded")
                break
            if unsupported:
                outcome = _Outcome(128, "StartError", unsupported)
                break
            try:
                launched = self._launch(container)
            except PodConfigError as problem:
                if problem.message != last_problem:
                    last_problem = problem.message
                    log.info("pod %s/%s: waiting: %s", self.namespace, self.name, problem.message)
                    now = rfc3339(_now())
                    self._patch_status(
                        waiting_status(
                            container, now=now, start_time=started, reason=problem.reason, message=problem.message
                        )
                    )
                self._deleted.wait(CONFIG_RETRY_SECONDS)
        started_at: str | None = None
        if launched is not None:
            process, termination_file = launched
            started_at = rfc3339(_now())
            log.info("pod %s/%s: started pid %s, output in %s", self.namespace, self.name, process.pid, self.log_path)
            container_id = f"towline-local://{self.uid}/{process.pid}"
            self._patch_status(
                running_status(container, now=started_at, started_at=started_at, container_id=container_id)
            )
            outcome = self._wait(process, container, termination_file, deadline)
            if outcome is None:
                return  # executor shut down
        assert outcome is not None
        log.info(
            "pod %s/%s: %s, exit code %s%s", self.namespace, self.name, outcome.reason, outcome.exit_code,
            f" ({outcome.pod_reason})" if outcome.pod_reason else "",
        )
        container_id = f"towline-local://{self.uid}/{self.pid or 0}"
        self._patch_status(
            terminated_status(
                container, now=rfc3339(_now()), started_at=started_at, exit_code=outcome.exit_code,
                reason=outcome.reason, message=outcome.message, container_id=container_id,
                pod_reason=outcome.pod_reason,
                pod_message=DEADLINE_MESSAGE if outcome.pod_reason == "DeadlineExceeded" else None,
            )
        )
        if self._deleted.is_set():
            self._finish_deleted()

    @staticmethod
    def _unsupported(spec: Mapping[str, Any]) -> str:
        if len(spec.get("containers") or []) != 1:
            return "the local step executor runs pods with exactly one container"
        if spec.get("initContainers") or spec.get("ephemeralContainers"):
            return "the local step executor does not run init or ephemeral containers"
        return ""

    def _launch(self, container: Mapping[str, Any]) -> tuple[subprocess.Popen[bytes], Path]:
        reader = ObjectReader(self._context.core, self.namespace)
        env = dict(self._context.base_env)
        env["HOSTNAME"] = self.name
        env.update(container_env(self._pod, container, secrets=reader.secret, config_maps=reader.config_map))
        argv = command_line(container, env)
        identity = _process_identity(self._pod, container)
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        self.pod_dir.chmod(0o700)
        mounts, termination_file = prepare_mounts(self._context.core, self._pod, container, self.pod_dir, reader)
        work = self.pod_dir / "workdir"
        work.mkdir(exist_ok=True)
        work.chmod(0o777)
        working_dir = container.get("workingDir") or ""
        scratch = self.pod_dir / "scratch"
        scratch.mkdir(exist_ok=True)
        error_file = self.pod_dir / "start-error"
        error_file.unlink(missing_ok=True)
        spec_file = self.pod_dir / "bootstrap.json"
        spec_file.write_text(json.dumps({
            "parentPid": os.getpid(),
            "errorFile": str(error_file),
            "scratch": str(scratch),
            "mounts": [mount.as_json() for mount in mounts],
            "workingDir": working_dir,
            "hostWorkingDir": str(work),
            "argv": argv,
            "expose": list(self._context.expose),
            **identity,
        }))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as output:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(BOOTSTRAP), str(spec_file)],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                env=env, cwd=self.pod_dir, start_new_session=True,
            )
        return self._process, termination_file

    def _wait(
        self, process: subprocess.Popen[bytes], container: Mapping[str, Any], termination_file: Path,
        deadline: float | None,
    ) -> _Outcome | None:
        pod_reason: str | None = None
        kill_at: float | None = None
        while True:
            try:
                process.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            if self._shutdown.is_set():
                self._signal(process, signal.SIGKILL)
                process.wait()
                return None
            if kill_at is None and self._deleted.is_set():
                kill_at = self._begin_stop(process, self._grace_seconds)
            if kill_at is None and deadline is not None and time.time() >= deadline:
                pod_reason = "DeadlineExceeded"
                grace = int(self._pod["spec"].get("terminationGracePeriodSeconds", 30))
                kill_at = self._begin_stop(process, grace)
            if kill_at is not None and time.monotonic() >= kill_at:
                self._signal(process, signal.SIGKILL)
        self._signal(process, signal.SIGKILL)  # whatever the command left behind in its group
        error_file = self.pod_dir / "start-error"
        start_error = error_file.read_text() if error_file.exists() else ""
        if start_error:
            return _Outcome(128, "StartError", start_error, pod_reason)
        exit_code = returncode_to_exit_code(process.returncode)
        reason = exit_reason(exit_code)
        file_data = termination_file.read_bytes() if termination_file.exists() else None
        message = termination_message(
            file_data=file_data, log=self._log_bytes(),
            policy=container.get("terminationMessagePolicy", "File"), exit_code=exit_code, reason=reason,
        )
        return _Outcome(exit_code, reason, message, pod_reason)

    def _begin_stop(self, process: subprocess.Popen[bytes], grace_seconds: int) -> float:
        self._signal(process, signal.SIGTERM)
        return time.monotonic() + max(grace_seconds, 0)

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)

    def _log_bytes(self) -> bytes:
        try:
            data: bytes = self.log_path.read_bytes()
            return data
        except OSError:
            return b""

    # -- API writes ---------------------------------------------------------------------------

    def _patch_status(self, status: dict[str, Any]) -> None:
        try:
            self._context.core.patch_namespaced_pod_status(self.name, self.namespace, {"status": status})
        except ApiException as error:
            if error.status != 404:
                log.warning("pod %s/%s: status write failed: %s", self.namespace, self.name, error.reason)

    def _finish_deleted(self) -> None:
        """The kubelet's last act for a terminating pod: remove the object once nothing runs."""
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=self.uid)
        )
        try:
            self._context.core.delete_namespaced_pod(self.name, self.namespace, body=options, grace_period_seconds=0)
        except ApiException as error:
            if error.status not in (404, 409):
                log.warning("pod %s/%s: final delete failed: %s", self.namespace, self.name, error.reason)
