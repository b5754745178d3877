"""Materialise a pod's volumes as files on this machine, as the kubelet's volume plugins would.

Supported: secret, configMap, downwardAPI, projected (secret, configMap,
downwardAPI, serviceAccountToken) and emptyDir. Anything else (hostPath, PVCs,
CSI, image volumes...) is refused with a message naming the volume, never
approximated. Files go into the pod's private directory (mode 0700, owned by the
executor's user) and are bound at the pod's mount paths by `podbootstrap` inside
the process's own mount namespace; the executor deletes them when the pod ends.
Secret values are read from the API only to write these files; they are never logged.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from towline_dev.clients import raw_json
from towline_dev.podspec import (
    DEFAULT_TERMINATION_MESSAGE_PATH,
    Pod,
    PodConfigError,
    VolumeFile,
    config_map_data,
    decode_secret_data,
    field_value,
    key_files,
)

READ_ONLY_KINDS = ("secret", "configMap", "downwardAPI", "projected")
"""The kubelet always mounts these read-only, whatever the volumeMount says."""


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool

    def as_json(self) -> dict[str, Any]:
        return {"source": str(self.source), "target": self.target, "readOnly": self.read_only}


class ObjectReader:
    """Reads the pod namespace's Secrets and ConfigMaps once per pod start, memoised."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self._core = core
        self._namespace = namespace
        self._secrets: dict[str, dict[str, bytes] | None] = {}
        self._config_maps: dict[str, dict[str, bytes] | None] = {}

    def secret(self, name: str) -> dict[str, bytes] | None:
        if name not in self._secrets:
            try:
                raw = self._core.read_namespaced_secret(name, self._namespace, _preload_content=False)
                self._secrets[name] = decode_secret_data(raw_json(raw).get("data"))
            except ApiException as error:
                if error.status != 404:
                    raise
                self._secrets[name] = None
        return self._secrets[name]

    def config_map(self, name: str) -> dict[str, bytes] | None:
        if name not in self._config_maps:
            try:
                raw = self._core.read_namespaced_config_map(name, self._namespace)
                self._config_maps[name] = config_map_data(
                    {"data": raw.data, "binaryData": raw.binary_data}
                )
            except ApiException as error:
                if error.status != 404:
                    raise
                self._config_maps[name] = None
        return self._config_maps[name]


def _files_of_object(kind: str, source: Mapping[str, Any], reader: ObjectReader, default_mode: int | None,
                     volume: str) -> list[VolumeFile]:
    name = source.get("secretName") or source.get("name") or ""
    optional = bool(source.get("optional"))
    data = reader.secret(name) if kind == "secret" else reader.config_map(name)
    if data is None:
        if optional:
            return []
        label = "secret" if kind == "secret" else "configmap"
        raise PodConfigError(
            "ContainerCreating", f'MountVolume.SetUp failed for volume "{volume}" : {label} "{name}" not found'
        )
    mode = source.get("defaultMode", default_mode)
    return key_files(data, source.get("items"), mode, what=f"{kind} {name}", optional=optional)


def _downward_files(pod: Pod, items: list[Mapping[str, Any]], default_mode: int | None) -> list[VolumeFile]:
    files = []
    for item in items:
        if "fieldRef" not in item:
            raise PodConfigError("ContainerCreating", "downwardAPI: only fieldRef items are supported locally")
        value = field_value(pod, item["fieldRef"]["fieldPath"]).encode()
        files.append(VolumeFile(item["path"], value, item.get("mode", default_mode or 0o644)))
    return files


def _token_file(core: client.CoreV1Api, pod: Pod, source: Mapping[str, Any], mode: int | None) -> VolumeFile:
    metadata = pod["metadata"]
    spec: dict[str, Any] = {
        "audiences": [source["audience"]] if source.get("audience") else [],
        "expirationSeconds": int(source.get("expirationSeconds", 3600)),
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": metadata["name"], "uid": metadata["uid"]},
    }
    account = pod["spec"].get("serviceAccountName", "default")
    request: Any = {"spec": spec}
    response = core.create_namespaced_service_account_token(
        account, metadata["namespace"], request, _preload_content=False
    )
    token = raw_json(response)["status"]["token"]
    return VolumeFile(source["path"], token.encode(), mode or 0o644)


def volume_files(core: client.CoreV1Api, pod: Pod, volume: Mapping[str, Any], reader: ObjectReader) -> list[VolumeFile]:
    """The files a (non-emptyDir) volume holds, or PodConfigError if it cannot be built here."""
    name = volume["name"]
    if "secret" in volume:
        return _files_of_object("secret", volume["secret"], reader, None, name)
    if "configMap" in volume:
        return _files_of_object("configMap", volume["configMap"], reader, None, name)
    if "downwardAPI" in volume:
        source = volume["downwardAPI"]
        return _downward_files(pod, source.get("items") or [], source.get("defaultMode"))
    if "projected" in volume:
        projected = volume["projected"]
        mode = projected.get("defaultMode")
        files: list[VolumeFile] = []
        for part in projected.get("sources") or []:
            if "secret" in part:
                files += _files_of_object("secret", part["secret"], reader, mode, name)
            elif "configMap" in part:
                files += _files_of_object("configMap", part["configMap"], reader, mode, name)
            elif "downwardAPI" in part:
                files += _downward_files(pod, part["downwardAPI"].get("items") or [], mode)
            elif "serviceAccountToken" in part:
                files.append(_token_file(core, pod, part["serviceAccountToken"], mode))
            else:
                raise PodConfigError("ContainerCreating", f"projected volume {name}: unsupported source {sorted(part)}")
        return files
    kinds = sorted(set(volume) - {"name"})
    raise PodConfigError(
        "ContainerCreating",
        f"volume {name!r} is of type {', '.join(kinds)}, which the local step executor does not provide "
        "(supported: secret, configMap, downwardAPI, projected, emptyDir)",
    )


def write_volume(directory: Path, files: list[VolumeFile], *, fs_group: int | None) -> None:
    """Write files with their modes; with fsGroup, group-own them and add group read like the kubelet."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755 if fs_group is None else 0o2755)
    if fs_group is not None:
        os.chown(directory, -1, fs_group)
    for file in files:
        path = directory / file.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(file.content)
        mode = file.mode
        if fs_group is not None:
            os.chown(path, -1, fs_group)
            mode |= 0o440
        path.chmod(mode)


def prepare_mounts(
    core: client.CoreV1Api, pod: Pod, container: Mapping[str, Any], pod_dir: Path, reader: ObjectReader
) -> tuple[list[Mount], Path]:
    """Materialise every volume the container mounts; return the mounts and the termination file."""
    security = pod["spec"].get("securityContext") or {}
    fs_group = security.get("fsGroup")
    volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
    volumes_dir = pod_dir / "volumes"
    mounts: list[Mount] = []
    built: set[str] = set()
    for volume_mount in container.get("volumeMounts") or []:
        name = volume_mount["name"]
        volume = volumes.get(name)
        if volume is None:
            raise PodConfigError("CreateContainerConfigError", f"volumeMount {name!r} names no volume of the pod")
        directory = volumes_dir / name
        if name not in built:
            if "emptyDir" in volume:
                directory.mkdir(parents=True, exist_ok=True)
                directory.chmod(0o777)  # the kubelet's emptyDir is world-writable
            else:
                write_volume(directory, volume_files(core, pod, volume, reader), fs_group=fs_group)
            built.add(name)
        source = directory / volume_mount["subPath"] if volume_mount.get("subPath") else directory
        read_only = bool(volume_mount.get("readOnly")) or any(kind in volume for kind in READ_ONLY_KINDS)
        mounts.append(Mount(source, volume_mount["mountPath"], read_only))
    termination_file = pod_dir / "termination-log"
    termination_file.unlink(missing_ok=True)
    termination_file.touch()
    termination_file.chmod(0o666)  # as the kubelet does, so any uid in the pod may write it
    target = container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
    mounts.append(Mount(termination_file, target, False))
    return mounts, termination_file


def remove_volumes(pod_dir: Path) -> None:
    shutil.rmtree(pod_dir / "volumes", ignore_errors=True)
