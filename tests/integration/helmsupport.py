"""The pinned helm against the chart: render it with values, or drive a release on a cluster."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.yamlread import yaml_documents

from towline_dev.binaries import BinarySet
from towline_dev.release import CHART, set_args
from towline_dev.versions import KUBERNETES_VERSION


def helm(binaries: BinarySet, *args: str, kubeconfig: Path | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [str(binaries.path("helm")), *args]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def template(binaries: BinarySet, values: dict[str, str] | None = None, *extra: str,
             namespace: str = "towline-system") -> subprocess.CompletedProcess[str]:
    return helm(binaries, "template", "towline", str(CHART), "--namespace", namespace,
                "--kube-version", KUBERNETES_VERSION, *set_args(values or {}), *extra)


def render(binaries: BinarySet, values: dict[str, str] | None = None, *extra: str,
           namespace: str = "towline-system") -> list[dict[str, Any]]:
    """The chart's documents as `helm template` renders them; fails the test on a render error."""
    result = template(binaries, values, *extra, namespace=namespace)
    assert result.returncode == 0, result.stderr
    return yaml_documents(result.stdout)


def find(documents: list[dict[str, Any]], kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    for document in documents:
        metadata = document["metadata"]
        if document["kind"] == kind and metadata["name"] == name and (
            namespace is None or metadata.get("namespace") == namespace
        ):
            return document
    raise AssertionError(f"no {kind} {name} rendered; got {[(d['kind'], d['metadata']['name']) for d in documents]}")
