"""The node's default StorageClass as manifests: the class, where volumes go, and how little each part may do."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from towline_dev.node import addons
from towline_dev.node.layout import LOCAL_PATH_IMAGE, NodePaths
from towline_dev.node.nodeimages import TEST_IMAGE, TEST_IMAGE_LINKS
from towline_dev.node.ociarchive import ImageFile, ImageSpec, write_oci_archive


def _manifests(tmp_path: Path) -> list[dict[str, Any]]:
    return addons.local_path_manifests(NodePaths(tmp_path).volumes_dir)


def _one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [m for m in manifests if m["kind"] == kind]
    return found


def test_local_path_is_the_default_class_deleting_volumes_and_binding_at_first_use(tmp_path: Path) -> None:
    storage_class = _one(_manifests(tmp_path), "StorageClass")
    assert storage_class["metadata"]["name"] == "local-path"
    assert storage_class["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert storage_class["provisioner"] == "rancher.io/local-path"
    assert storage_class["reclaimPolicy"] == "Delete"
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"


def test_volumes_go_into_the_node_state_directory(tmp_path: Path) -> None:
    data = _one(_manifests(tmp_path), "ConfigMap")["data"]
    config = json.loads(data["config.json"])
    assert config == {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                       "paths": [str(tmp_path / "volumes")]}]}
    assert NodePaths(tmp_path).volumes_dir.parent == tmp_path, "removed with the node's state"
    assert data["setup"].endswith('mkdir -m 0777 -p "$VOL_DIR"\n')
    assert data["teardown"].endswith('rm -rf "$VOL_DIR"\n')


def test_the_provisioner_runs_non_root_on_a_read_only_root_with_no_capability(tmp_path: Path) -> None:
    pod = _one(_manifests(tmp_path), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    [container] = pod["containers"]
    assert container["image"] == LOCAL_PATH_IMAGE
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert [m["readOnly"] for m in container["volumeMounts"]] == [True]


def test_helper_pods_are_root_with_only_dac_override_and_no_token(tmp_path: Path) -> None:
    helper = yaml.safe_load(_one(_manifests(tmp_path), "ConfigMap")["data"]["helperPod.yaml"])
    assert helper == addons.local_path_helper_pod()
    spec = helper["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = spec["containers"]
    assert container["name"] == "helper-pod", "the provisioner collects the helper's log by this name"
    assert container["image"] == TEST_IMAGE
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_provisioner_reads_no_configmap_or_secret_and_touches_pods_only_in_its_namespace(tmp_path: Path) -> None:
    manifests = _manifests(tmp_path)
    cluster_rules = _one(manifests, "ClusterRole")["rules"]
    resources = {r for rule in cluster_rules for r in rule["resources"]}
    assert resources == {"nodes", "persistentvolumeclaims", "persistentvolumes", "events", "storageclasses"}
    role = _one(manifests, "Role")
    assert role["metadata"]["namespace"] == addons.LOCAL_PATH_NAMESPACE
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"pods", "pods/log"}
    for rule in cluster_rules:
        if {"create", "update", "patch", "delete"} & set(rule["verbs"]):
            assert rule["resources"] in (["persistentvolumes"], ["events"]), rule


def test_the_namespace_comes_first_and_says_its_pods_are_privileged(tmp_path: Path) -> None:
    first = _manifests(tmp_path)[0]
    assert first["kind"] == "Namespace"
    assert first["metadata"]["labels"] == {"pod-security.kubernetes.io/enforce": "privileged"}


@pytest.mark.parametrize(("path", "target"), sorted(TEST_IMAGE_LINKS.items()))
def test_an_image_carries_its_applet_links(tmp_path: Path, path: str, target: str) -> None:
    binary = tmp_path / "busybox"
    binary.write_bytes(b"\x7fELF pretend")
    spec = ImageSpec(TEST_IMAGE, [ImageFile(binary, "/bin/busybox")], entrypoint=["/bin/busybox"],
                     symlinks=TEST_IMAGE_LINKS)
    write_oci_archive(spec, tmp_path / "image.tar")
    with tarfile.open(tmp_path / "image.tar") as archive:
        index = json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest_blob = "blobs/sha256/" + index["manifests"][0]["digest"].split(":")[1]
        manifest = json.loads(archive.extractfile(manifest_blob).read())  # type: ignore[union-attr]
        layer = archive.extractfile("blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1])
        assert layer is not None
        with tarfile.open(fileobj=io.BytesIO(layer.read())) as files:
            link = files.getmember(path.lstrip("/"))
    assert link.issym()
    assert link.linkname == target
