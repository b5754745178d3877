"""What the Helm tests share: helm against a cluster, the release's objects, the chart's pods."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from tests.integration.helmsupport import helm

from towline_dev.controlplane import ControlPlane
from towline_dev.existing import ExistingCluster
from towline_dev.release import CHART, NAMESPACE, RELEASE, name_prefix, set_args

Cluster = ControlPlane | ExistingCluster
CHART_LABELS = ("app.kubernetes.io/instance=towline", "app.kubernetes.io/name=towline",
                "app.kubernetes.io/part-of=towline")


def image_values() -> dict[str, str]:
    """The images `make dev` loads into the local node; on an existing cluster, the ones you pushed."""
    return {
        "image.repository": os.environ.get("TOWLINE_TEST_IMAGE_REPOSITORY", "localhost/towline"),
        "image.tag": os.environ.get("TOWLINE_TEST_IMAGE_TAG", "dev"),
        "runner.image": os.environ.get("TOWLINE_TEST_RUNNER_IMAGE", "localhost/towline-runner:dev"),
    }


def on(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return helm(cluster.binaries, *args, kubeconfig=cluster.kubeconfig)


def install(cluster: Cluster, release: str, namespace: str, values: dict[str, str]) -> None:
    result = on(cluster, "install", release, str(CHART), "--namespace", namespace, "--create-namespace",
                *set_args({**image_values(), **values}))
    assert result.returncode == 0, result.stdout + result.stderr


def kept_record(release: str = RELEASE, namespace: str = NAMESPACE) -> set[tuple[str, str]]:
    """(kind, namespace/name) of what `helm uninstall` keeps of a release besides the CRDs: the archive's record,
    its volume and its signing key (helm.sh/resource-policy: keep; docs/archive.md#uninstalling)."""
    prefix = name_prefix(release)
    return {("PersistentVolumeClaim", f"{namespace}/{prefix}-archive"),
            ("Secret", f"{namespace}/{prefix}-archive-signing-key")}


def uninstall(cluster: Cluster, release: str, namespace: str) -> None:
    result = on(cluster, "uninstall", release, "--namespace", namespace, "--ignore-not-found")
    assert result.returncode == 0, result.stdout + result.stderr


def deployment(cluster: Cluster, namespace: str = NAMESPACE, release: str = RELEASE) -> dict[str, Any]:
    """The operator Deployment of `release` (named after it: towline_dev.release.name_prefix)."""
    found: dict[str, Any] = json.loads(cluster.kubectl(
        "get", "deployment", f"{name_prefix(release)}-operator", "-n", namespace, "-o", "json").stdout)
    return found


def container_env(found: dict[str, Any]) -> dict[str, str]:
    (container,) = found["spec"]["template"]["spec"]["containers"]
    return {v["name"]: v.get("value", "") for v in container["env"]}


def labelled_objects(cluster: Cluster, label: str) -> list[tuple[str, str]]:
    """(kind, namespace/name) of every object of every listable kind carrying `label`."""
    kinds = cluster.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    listed = cluster.kubectl("get", ",".join(kinds), "--all-namespaces", "-l", label, "-o", "json",
                             check=False, timeout=120)
    items = json.loads(listed.stdout or '{"items": []}')["items"]
    assert listed.returncode == 0 or items, listed.stderr
    return sorted((i["kind"], f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}") for i in items)


def ready_nodes(cluster: Cluster) -> list[str]:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return [n["metadata"]["name"] for n in nodes if any(
        c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions", []))]


def chart_pods(cluster: Cluster, selector: str = "app.kubernetes.io/name=towline", *,
               terminating: bool = False) -> list[dict[str, Any]]:
    listed = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json")
    pods: list[dict[str, Any]] = [
        p for p in json.loads(listed.stdout)["items"] if terminating or not p["metadata"].get("deletionTimestamp")]
    return pods
