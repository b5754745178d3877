"""The pinned helm against the chart: render it with values, or drive a release on a cluster."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

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


def yaml_documents(text: str) -> list[dict[str, Any]]:
    """The YAML documents in `text` (empty ones left out), read by libyaml when PyYAML has it: the chart's render is
    about 360 KB (its CRDs' schemas), which PyYAML's pure-Python loader took 0.44 s of CPU to read against helm's own
    0.27 s to render, and the chart tests render it some 150 times (docs/benchmarks-history.md)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [document for document in yaml.load_all(text, Loader=loader) if document]


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
