"""kubeconform over rendered manifests, offline: the pinned binary and the schemas it reads.

kubeconform (github.com/yannh/kubeconform) validates each manifest against the JSON schema of its
kind. It normally downloads those schemas; here they are made locally (towline_dev.jsonschemas):
Kubernetes' from the OpenAPI document in the k8s.io/kubernetes module the binaries are built from,
Towline's from its CRDs. Both are written in kubeconform's own layout for `-strict`
(`<location>/v<kubernetes>-standalone-strict/<kind>[-<group>]-<version>.json`), so the command line is
the one its documentation gives, with `-schema-location` pointing here instead of the internet.

The Kubernetes schemas are cached outside the repository, keyed by the Kubernetes version and this
converter's source; the CRDs' are written wherever the caller says (they change with the branch).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from towline_dev import jsonschemas
from towline_dev.binaries import (
    BinariesUnavailable,
    Progress,
    _exclusive_lock,
    _go_env,
    _stderr_progress,
    cache_root,
    go_install_once,
)
from towline_dev.versions import KUBECONFORM_VERSION, KUBERNETES_VERSION

STRICT_DIRECTORY = f"{KUBERNETES_VERSION}-standalone-strict"
"""Where kubeconform -strict -kubernetes-version X.Y.Z looks under a -schema-location without a template."""


def cached_kubeconform() -> Path:
    """Where kubeconform of the pinned version lives once built."""
    return cache_root() / f"kubeconform-{KUBECONFORM_VERSION}" / "bin" / "kubeconform"


def find_kubeconform(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """kubeconform from the cache, else built once from the Go module proxy (`make binaries` does it)."""
    return go_install_once(
        f"github.com/yannh/kubeconform/cmd/kubeconform@{KUBECONFORM_VERSION}",
        cached_kubeconform(),
        ldflags=f"-s -w -X main.version={KUBECONFORM_VERSION}",
        build=build,
        progress=progress,
    )


SKIPPED_KINDS = {
    "monitoring.coreos.com/v1/ServiceMonitor": "prometheus-operator's CRD, which no pinned local source provides",
    "monitoring.coreos.com/v1/PrometheusRule": "prometheus-operator's CRD, which no pinned local source provides "
    "(its rules are checked by promtool instead: tests/integration/test_chart_alerts.py)",
    "gateway.networking.k8s.io/v1/HTTPRoute": "Gateway API's CRD, which no pinned local source provides",
}
"""Kinds the chart may render that are not Kubernetes' own nor Towline's, by kubeconform GVK, and why no
schema checks them. Named one by one: any other kind without a schema is an error, never skipped."""


def kubernetes_openapi() -> Path:
    """swagger.json of the pinned k8s.io/kubernetes module (already in the module cache once the binaries are built)."""
    go = shutil.which("go")
    if go is None:
        raise BinariesUnavailable("Go is not installed to fetch k8s.io/kubernetes (the schemas come from its OpenAPI)")
    module = f"k8s.io/kubernetes@{KUBERNETES_VERSION}"
    with tempfile.TemporaryDirectory(prefix="towline-openapi-") as outside_any_module:
        result = subprocess.run(
            [go, "mod", "download", "-json", module],
            cwd=outside_any_module, env=_go_env(), capture_output=True, text=True, check=False,
        )
    if result.returncode != 0:
        raise BinariesUnavailable(f"cannot download {module}: {result.stdout}{result.stderr}")
    document = Path(json.loads(result.stdout)["Dir"]) / "api" / "openapi-spec" / "swagger.json"
    if not document.is_file():
        raise BinariesUnavailable(f"{module} has no {document}")
    return document


def _converter_digest() -> str:
    """Changes whenever the conversion does, so a cache made by another one is never used."""
    return hashlib.sha256(Path(jsonschemas.__file__).read_bytes()).hexdigest()[:12]


def kubernetes_schema_location(progress: Progress = _stderr_progress) -> Path:
    """A -schema-location holding a strict schema for every kind of the pinned Kubernetes; made once."""
    location = cache_root() / f"kubeconform-schemas-{KUBERNETES_VERSION}-{_converter_digest()}"
    complete = location / STRICT_DIRECTORY / "complete"
    if complete.is_file():
        return location
    with _exclusive_lock(cache_root() / "kubeconform-schemas.lock"):
        if complete.is_file():
            return location
        document = kubernetes_openapi()
        progress(f"kubeconform schemas: converting {document} into {location}")
        schemas = jsonschemas.kubernetes_schemas(json.loads(document.read_text()))
        shutil.rmtree(location, ignore_errors=True)
        _write(schemas, location)
        complete.write_text(f"{len(schemas)}\n")
        return location


def write_crd_schemas(crd_files: Iterable[Path], location: Path) -> list[str]:
    """Strict schemas for every version of the CRDs in `crd_files`, as the -schema-location `location`."""
    openapi = json.loads(kubernetes_openapi().read_text())
    schemas: dict[str, Any] = {}
    for path in crd_files:
        for crd in yaml.safe_load_all(path.read_text()):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                schemas.update(jsonschemas.crd_schemas(crd, openapi))
    _write(schemas, location)
    return sorted(schemas)


def _write(schemas: dict[str, Any], location: Path) -> None:
    directory = location / STRICT_DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    for name, schema in schemas.items():
        (directory / name).write_text(json.dumps(schema, separators=(",", ":")))


@dataclass(frozen=True)
class Validation:
    """kubeconform's verdict on a set of manifests: every resource (valid ones too) and the counts."""

    resources: list[dict[str, Any]]
    summary: dict[str, int]
    command: list[str]

    def problems(self) -> list[str]:
        """One line per invalid resource or error: what, where and why."""
        return [
            f"{resource['kind']} {resource['name']} ({resource['filename']}): {resource['msg']}"
            for resource in self.resources if resource["status"] in {"statusInvalid", "statusError"}
        ]

    def counted(self, status: str) -> list[tuple[str, str]]:
        """(kind, name) of each resource with a status (`statusValid`, `statusSkipped`, ...)."""
        return [(resource["kind"], resource["name"]) for resource in self.resources if resource["status"] == status]


def validate(
    kubeconform: Path, locations: Sequence[Path], paths: Sequence[Path], *, skip: Iterable[str] = SKIPPED_KINDS,
) -> Validation:
    """kubeconform -strict over `paths` (files or directories of YAML) with the schemas at `locations` only."""
    command = [str(kubeconform), "-strict", "-kubernetes-version", KUBERNETES_VERSION.lstrip("v"),
               "-output", "json", "-summary", "-verbose"]
    for location in locations:
        command += ["-schema-location", str(location)]
    skipped = ",".join(sorted(skip))
    if skipped:
        command += ["-skip", skipped]
    command += [str(path) for path in paths]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError as error:
        output = result.stdout + result.stderr
        raise RuntimeError(f"{' '.join(command)} printed no report ({error}): {output}") from error
    return Validation(report["resources"], report["summary"], command)


CHART_CRDS = Path(__file__).resolve().parents[2] / "crds"
"""The generated CRDs: the same documents as the chart's templates/crds.yaml, without its labels."""


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m towline_dev.kubeconform FILE_OR_DIR...` (`-` reads standard input, e.g. from `helm template`)."""
    import argparse  # noqa: PLC0415 - only the command line needs it

    parser = argparse.ArgumentParser(prog="python -m towline_dev.kubeconform", description=main.__doc__)
    parser.add_argument("paths", nargs="+", type=Path, help="manifests: YAML files, directories, or -")
    arguments = parser.parse_args(argv)
    kubeconform = find_kubeconform()
    with tempfile.TemporaryDirectory(prefix="towline-crd-schemas-") as crds:
        write_crd_schemas(sorted(CHART_CRDS.glob("*.yaml")), Path(crds))
        result = validate(kubeconform, [kubernetes_schema_location(), Path(crds)], arguments.paths)
    for line in result.problems():
        print(line)
    skipped = ", ".join(f"{kind} {name}" for kind, name in result.counted("statusSkipped"))
    print(f"{result.summary} (skipped by name: {skipped or 'none'})")
    return 1 if result.summary["invalid"] or result.summary["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
