"""Pure kubelet semantics the step executor reproduces: env, volume files, messages, status.

Every function here takes plain pod dicts (the API's JSON shape) and returns plain
data, so the rules can be unit-tested without a cluster. The numbers and reasons
follow the kubelet (pkg/kubelet/container/runtime.go, kuberuntime_container.go,
status/generate.go) so code tested here meets the same limits in a real cluster.
"""

from __future__ import annotations

import base64
import datetime
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Pod = dict[str, Any]
KeyData = Mapping[str, bytes]
Lookup = Callable[[str], KeyData | None]
"""Returns an object's data by name within the pod's namespace, or None if it does not exist."""

MAX_TERMINATION_MESSAGE_BYTES = 4 * 1024
"""kubelet MaxContainerTerminationMessageLength: the file is read tail-first up to this size."""
MAX_TERMINATION_MESSAGE_LOG_BYTES = 2 * 1024
"""kubelet MaxContainerTerminationMessageLogLength: the log fallback keeps this many trailing bytes."""
MAX_TERMINATION_MESSAGE_LOG_LINES = 80
"""kubelet MaxContainerTerminationMessageLogLines: the log fallback reads this many trailing lines."""

DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
DEFAULT_VOLUME_FILE_MODE = 0o644
DEFAULT_SCHEDULER = "default-scheduler"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


class PodConfigError(Exception):
    """The pod cannot start yet; `reason` is the kubelet's waiting reason for the container."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# -- termination messages --------------------------------------------------------------------


def tail_bytes(data: bytes, limit: int) -> bytes:
    """The last `limit` bytes, as the kubelet's tail.ReadAtMost and circular buffer keep them."""
    return data[-limit:] if len(data) > limit else data


def log_tail_message(log: bytes) -> str:
    """The FallbackToLogsOnError message: the last 80 lines of the log, then its last 2048 bytes."""
    lines = log.splitlines(keepends=True)[-MAX_TERMINATION_MESSAGE_LOG_LINES:]
    return tail_bytes(b"".join(lines), MAX_TERMINATION_MESSAGE_LOG_BYTES).decode("utf-8", "replace")


def termination_message(
    *, file_data: bytes | None, log: bytes, policy: str, exit_code: int, reason: str
) -> str:
    """What the kubelet puts into `state.terminated.message` for an exited container.

    `file_data` is the termination-message file's content (None when it does not
    exist). The file wins when it is non-empty; with FallbackToLogsOnError a failed
    container that started (reason is not ContainerCannotRun) gets its log tail.
    """
    fallback = policy == "FallbackToLogsOnError" and exit_code != 0 and reason != "ContainerCannotRun"
    if file_data:
        return tail_bytes(file_data, MAX_TERMINATION_MESSAGE_BYTES).decode("utf-8", "replace")
    if fallback:
        return log_tail_message(log)
    return ""


# -- environment -----------------------------------------------------------------------------

_EXPANSION = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes $(VAR) expansion: `$$` escapes, unknown references stay as written."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _EXPANSION.sub(replace, text)


def field_value(pod: Pod, field_path: str) -> str:
    """The downward API's value for a fieldRef (no pod IP: there is no pod network here)."""
    metadata = pod.get("metadata", {})
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", field_path)
    if match:
        return str(metadata.get(match.group(1), {}).get(match.group(2), ""))
    simple = {
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": pod.get("spec", {}).get("nodeName", ""),
        "spec.serviceAccountName": pod.get("spec", {}).get("serviceAccountName", ""),
        "status.hostIP": "127.0.0.1",
        "status.podIP": "",
    }
    if field_path in simple:
        return str(simple[field_path])
    if field_path in ("metadata.labels", "metadata.annotations"):
        items = metadata.get(field_path.split(".")[1], {})
        return "\n".join(f'{key}="{value}"' for key, value in sorted(items.items()))
    raise PodConfigError("CreateContainerConfigError", f"unsupported fieldRef {field_path!r}")


def _key_value(pod: Pod, kind: str, reference: Mapping[str, Any], lookup: Lookup) -> str | None:
    """One key of a Secret/ConfigMap for an env var; None if it is optional and missing."""
    name, key, optional = reference["name"], reference["key"], bool(reference.get("optional"))
    data = lookup(name)
    if data is None:
        if optional:
            return None
        raise PodConfigError("CreateContainerConfigError", f'{kind.lower()} "{name}" not found')
    if key not in data:
        if optional:
            return None
        namespace = pod["metadata"]["namespace"]
        raise PodConfigError("CreateContainerConfigError", f"couldn't find key {key} in {kind} {namespace}/{name}")
    return data[key].decode("utf-8", "replace")


def _env_from(container: Mapping[str, Any], secrets: Lookup, config_maps: Lookup) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, field, lookup in (("Secret", "secretRef", secrets), ("ConfigMap", "configMapRef", config_maps)):
            reference = source.get(field)
            if reference is None:
                continue
            data = lookup(reference["name"])
            if data is None:
                if reference.get("optional"):
                    continue
                raise PodConfigError("CreateContainerConfigError", f'{kind.lower()} "{reference["name"]}" not found')
            for key, content in data.items():
                env[prefix + key] = content.decode("utf-8", "replace")
    return env


def _env_source_value(
    pod: Pod, name: str, source: Mapping[str, Any], secrets: Lookup, config_maps: Lookup
) -> str | None:
    if "secretKeyRef" in source:
        return _key_value(pod, "Secret", source["secretKeyRef"], secrets)
    if "configMapKeyRef" in source:
        return _key_value(pod, "ConfigMap", source["configMapKeyRef"], config_maps)
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"])
    raise PodConfigError(
        "CreateContainerConfigError",
        f"env {name}: only value, secretKeyRef, configMapKeyRef and fieldRef are supported locally",
    )


def container_env(
    pod: Pod, container: Mapping[str, Any], *, secrets: Lookup, config_maps: Lookup
) -> dict[str, str]:
    """The container's environment from `envFrom` then `env`, in order, with $(VAR) expansion."""
    env = _env_from(container, secrets, config_maps)
    for variable in container.get("env") or []:
        name = variable["name"]
        source = variable.get("valueFrom")
        if source is None:
            env[name] = expand(variable.get("value", ""), env)
            continue
        value = _env_source_value(pod, name, source, secrets, config_maps)
        if value is not None:
            env[name] = value
    return env


def command_line(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """`command + args` with $(VAR) expansion; without an image there is no entrypoint to fall back to."""
    argv = [expand(part, env) for part in (container.get("command") or []) + (container.get("args") or [])]
    if not argv:
        raise PodConfigError(
            "CreateContainerConfigError",
            "the container has no command: the local step executor runs no images, so command is required",
        )
    return argv


# -- volume files ----------------------------------------------------------------------------


@dataclass(frozen=True)
class VolumeFile:
    path: str
    """Relative to the volume's root."""
    content: bytes
    mode: int


def decode_secret_data(data: Mapping[str, str] | None) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in (data or {}).items()}


def config_map_data(config_map: Mapping[str, Any]) -> dict[str, bytes]:
    files = {key: value.encode() for key, value in (config_map.get("data") or {}).items()}
    files.update(decode_secret_data(config_map.get("binaryData")))
    return files


def _safe_relative(path: str) -> str:
    normal = posixpath.normpath(path)
    if posixpath.isabs(normal) or normal == ".." or normal.startswith("../"):
        raise PodConfigError("ContainerCreating", f"volume item path {path!r} must be relative and stay inside")
    return normal


def key_files(
    data: KeyData, items: list[Mapping[str, Any]] | None, default_mode: int | None, *, what: str, optional: bool
) -> list[VolumeFile]:
    """Files of a secret/configMap volume: every key, or only `items` (key -> path, own mode)."""
    mode = DEFAULT_VOLUME_FILE_MODE if default_mode is None else default_mode
    if not items:
        return [VolumeFile(_safe_relative(key), value, mode) for key, value in sorted(data.items())]
    files = []
    for item in items:
        key = item["key"]
        if key not in data:
            if optional:
                continue
            raise PodConfigError("ContainerCreating", f"configured key {key!r} not found in {what}")
        files.append(VolumeFile(_safe_relative(item["path"]), data[key], item.get("mode", mode)))
    return files


# -- status ----------------------------------------------------------------------------------


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: bool, now: str, reason: str | None = None) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": kind, "status": "True" if status else "False", "lastProbeTime": None, "lastTransitionTime": now,
    }
    if reason:
        condition["reason"] = reason
    return condition


def _container_status(container: Mapping[str, Any], state: dict[str, Any], *, running: bool) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": running,
        "started": running,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


def waiting_status(
    container: Mapping[str, Any], *, now: str, start_time: str, reason: str, message: str = ""
) -> dict[str, Any]:
    """Pending: accepted by the node, container not started (creating, or configuration missing)."""
    waiting = {"reason": reason, **({"message": message} if message else {})}
    return {
        "phase": "Pending",
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "startTime": start_time,
        "conditions": [
            _condition("PodReadyToStartContainers", True, now),
            _condition("Initialized", True, now),
            _condition("ContainersReady", False, now, "ContainersNotReady"),
            _condition("Ready", False, now, "ContainersNotReady"),
        ],
        "containerStatuses": [_container_status(container, {"waiting": waiting, "running": None}, running=False)],
    }


def running_status(container: Mapping[str, Any], *, now: str, started_at: str, container_id: str) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [
            _condition("ContainersReady", True, now),
            _condition("Ready", True, now),
        ],
        "containerStatuses": [
            _container_status(container, {"running": {"startedAt": started_at}, "waiting": None}, running=True)
        ],
    }
    status["containerStatuses"][0]["containerID"] = container_id
    return status


def terminated_status(
    container: Mapping[str, Any],
    *,
    now: str,
    started_at: str | None,
    exit_code: int,
    reason: str,
    message: str,
    container_id: str,
    pod_reason: str | None = None,
    pod_message: str | None = None,
) -> dict[str, Any]:
    """Succeeded (exit 0) or Failed; `pod_reason` is set for DeadlineExceeded."""
    succeeded = exit_code == 0 and pod_reason is None
    terminal_reason = "PodCompleted" if succeeded else "PodFailed"
    terminated: dict[str, Any] = {
        "exitCode": exit_code, "reason": reason, "finishedAt": now, "containerID": container_id,
        "startedAt": started_at or now,
    }
    if message:
        terminated["message"] = message
    status: dict[str, Any] = {
        "phase": "Succeeded" if succeeded else "Failed",
        "conditions": [
            _condition("PodReadyToStartContainers", False, now),
            _condition("ContainersReady", False, now, terminal_reason),
            _condition("Ready", False, now, terminal_reason),
        ],
        "containerStatuses": [
            _container_status(
                container, {"terminated": terminated, "running": None, "waiting": None}, running=False
            )
        ],
    }
    status["containerStatuses"][0]["containerID"] = container_id
    if pod_reason:
        status["reason"] = pod_reason
        status["message"] = pod_message or ""
    return status


def exit_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


def returncode_to_exit_code(returncode: int) -> int:
    """Popen reports death by signal N as -N; container runtimes report 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


# -- which pods, and when ---------------------------------------------------------------------


def should_bind(pod: Pod, namespaces: frozenset[str] | None) -> bool:
    """Unscheduled, for the default scheduler, in a namespace this executor serves, not terminating."""
    spec = pod.get("spec", {})
    metadata = pod.get("metadata", {})
    return (
        not spec.get("nodeName")
        and spec.get("schedulerName", DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
        and (namespaces is None or metadata.get("namespace") in namespaces)
        and not metadata.get("deletionTimestamp")
        and pod.get("status", {}).get("phase", "Pending") == "Pending"
    )


def is_terminal(pod: Pod) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def deletion_grace_seconds(pod: Pod) -> int:
    metadata_grace = pod.get("metadata", {}).get("deletionGracePeriodSeconds")
    if metadata_grace is not None:
        return int(metadata_grace)
    return int(pod.get("spec", {}).get("terminationGracePeriodSeconds", 30))
