"""The node's default StorageClass: a claim that names no class gets a volume on the node.

`local-path` (local-path-provisioner, towline_dev.node.addons) is the cluster's default class, binding
only once a pod uses the claim (WaitForFirstConsumer); each volume is a directory under the node's state
directory, made and removed by the provisioner's helper pods. The pods here are shaped as the archive's
(charts/towline/templates/archive.yaml): uid 65532, fsGroup 65532, in a namespace enforcing Pod Security
`restricted`, so what the chart's default needs is what is shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.nodesupport import create, exec_in, sleeper_pod, wait_running

from towline_dev.controlplane import ControlPlane
from towline_dev.node.addons import LOCAL_PATH_CLASS
from towline_dev.node.realnode import NodeCluster
from towline_dev.processes import wait_for

NAMESPACE = "storage-default-class"
MOUNT = "/var/lib/data"


@pytest.fixture(scope="module")
def plane(real_node: NodeCluster) -> Iterator[ControlPlane]:
    plane = real_node.plane
    assert plane is not None
    create(plane, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
    }}})
    yield plane
    plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def volumes_dir(real_node: NodeCluster) -> Path:
    assert real_node.node is not None
    return real_node.node.paths.volumes_dir


def _claim(name: str) -> dict[str, Any]:
    """As the chart's archive claim with no `archive.persistence.storageClass`: no storageClassName at all."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
    }


def _pod_using(name: str, claim: str) -> dict[str, Any]:
    pod = sleeper_pod(name, NAMESPACE)
    pod["spec"]["securityContext"]["fsGroup"] = 65532
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": MOUNT}]
    return pod


def _get(plane: ControlPlane, path: str) -> dict[str, Any] | None:
    status, body = plane.api_get(path)
    if status == 404:
        return None
    assert status == 200, body[:500]
    found: dict[str, Any] = json.loads(body)
    return found


def _claim_path(name: str) -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/{name}"


def _wait_bound(plane: ControlPlane, name: str) -> dict[str, Any]:
    def bound() -> bool:
        claim = _get(plane, _claim_path(name)) or {}
        return bool(claim.get("status", {}).get("phase") == "Bound")

    wait_for(bound, timeout=120, interval=0.2, what=f"claim {name} to be Bound")
    claim = _get(plane, _claim_path(name))
    assert claim is not None
    return claim


def _sh(plane: ControlPlane, pod: str, script: str) -> str:
    result = exec_in(plane, NAMESPACE, pod, "/bin/busybox", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def _volume_in_use(plane: ControlPlane, claim: str, pod: str) -> tuple[dict[str, Any], Path]:
    """Create `claim` and a pod using it; once the pod runs, the bound volume and its directory on the node."""
    create(plane, _claim(claim))
    create(plane, _pod_using(pod, claim))
    wait_running(plane, NAMESPACE, pod)
    bound = _wait_bound(plane, claim)
    volume = _get(plane, f"/api/v1/persistentvolumes/{bound['spec']['volumeName']}")
    assert volume is not None
    return volume, Path(volume["spec"]["hostPath"]["path"])


def test_a_claim_naming_no_class_gets_the_default_and_binds_once_a_pod_uses_it(
    plane: ControlPlane, volumes_dir: Path
) -> None:
    create(plane, _claim("first-use"))
    claim = _get(plane, _claim_path("first-use"))
    assert claim is not None
    assert claim["spec"]["storageClassName"] == LOCAL_PATH_CLASS, "the API server's DefaultStorageClass filled it in"
    assert claim["status"]["phase"] == "Pending", "WaitForFirstConsumer: no volume before a pod needs it"

    create(plane, _pod_using("first-user", "first-use"))
    wait_running(plane, NAMESPACE, "first-user")
    bound = _wait_bound(plane, "first-use")
    volume = _get(plane, f"/api/v1/persistentvolumes/{bound['spec']['volumeName']}")
    assert volume is not None
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    directory = Path(volume["spec"]["hostPath"]["path"])
    assert directory.parent == volumes_dir, "the volume lives in this node's own state directory"
    assert directory.is_dir()


def test_a_restricted_non_root_pod_writes_and_reads_its_volume(plane: ControlPlane) -> None:
    _, directory = _volume_in_use(plane, "writable", "writer")
    written = _sh(plane, "writer", f"id -u; echo 'run 1 archived' > {MOUNT}/records; cat {MOUNT}/records")
    assert written.split("\n")[:2] == ["65532", "run 1 archived"]
    assert (directory / "records").read_text() == "run 1 archived\n", "the file is on the node, in the volume"


def test_a_volume_keeps_its_data_for_the_next_pod(plane: ControlPlane) -> None:
    _volume_in_use(plane, "kept", "first-writer")
    _sh(plane, "first-writer", f"echo 'signed checkpoint 7' > {MOUNT}/checkpoint")
    plane.kubectl("delete", "pod", "first-writer", "-n", NAMESPACE, "--wait=true", timeout=120)

    create(plane, _pod_using("second-reader", "kept"))
    wait_running(plane, NAMESPACE, "second-reader")
    assert _sh(plane, "second-reader", f"cat {MOUNT}/checkpoint") == "signed checkpoint 7\n"


def test_deleting_the_claim_removes_its_volume_and_the_directory_on_the_node(plane: ControlPlane) -> None:
    volume, directory = _volume_in_use(plane, "short-lived", "short-user")
    _sh(plane, "short-user", f"mkdir {MOUNT}/nested && echo x > {MOUNT}/nested/file")
    plane.kubectl("delete", "pod", "short-user", "-n", NAMESPACE, "--wait=true", timeout=120)
    assert directory.is_dir()

    plane.kubectl("delete", "pvc", "short-lived", "-n", NAMESPACE, "--wait=true", timeout=120)
    volume_path = f"/api/v1/persistentvolumes/{volume['metadata']['name']}"
    wait_for(lambda: _get(plane, volume_path) is None, timeout=120, interval=0.2,
             what=f"volume {volume['metadata']['name']} to be deleted")
    assert not directory.exists(), "the teardown removed the directory (files of uid 65532 in it included)"
