"""`make release VERSION=x.y.z`: one release's artifacts in dist/, built from this checkout.

dist/ is emptied, then holds for VERSION:

- `towline-VERSION.tgz`: the chart, `helm package`d with version and appVersion VERSION, so that
  its default images are the release's (checked by rendering the package);
- `towline-VERSION.oci.tar` and `towline-runner-VERSION.oci.tar`: the two images
  `towline_dev.images` builds (the same manifests the tests run, so the same digests), their
  archives naming `<image.repository>:VERSION` and `<image.repository>-runner:VERSION`;
- the wheel and sdist of the `towline` distribution at VERSION (the `kubectl-towline` plugin), which
  depends on `towline-step==VERSION` rather than carrying the package `towline_step`;
- the wheel and sdist of the `towline-step` distribution at VERSION (stepkit/: the step kit alone, what
  a step type's image installs; the SDK with its `sdk` extra);
- `workflow.schema.json`: the JSON Schema editors check Workflow YAML with (schemas/ in the checkout,
  which must be what the models generate: a stale one is refused);
- `images.txt` (each image's reference and manifest digest) and `SHA256SUMS` of every file.

A VERSION that is not x.y.z[-prerelease], or that CHANGELOG.md has no section for, is refused
before anything is built. This never edits the checkout (versions are set in copies) and never
pushes anything anywhere: publishing is docs/releasing.md's business.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from towline.validation.editorschema import render, workflow_schema
from towline_dev import REPO_ROOT
from towline_dev.binaries import find_binaries
from towline_dev.imagebuild import stage_files
from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE, context_files, ensure_towline_images
from towline_dev.ocilayout import read_archive, write_archive
from towline_dev.versions import KUBERNETES_VERSION

Progress = Callable[[str], None]
PythonBuilder = Callable[[Path, str, Path, str], list[Path]]
"""Builds the sdist and wheel of a distribution (root, version, out, project), as `build_python` does."""

CHART = Path("charts") / "towline"
CHART_NAME = "towline"
PYTHON_SOURCES = ("pyproject.toml", "README.md", "operator", "connectors", "examples")
"""What the wheel and the sdist are built from: pyproject.toml, its readme, its package directories and the
top-level examples (data files: the web view's editor offers them)."""
STEP_KIT = "stepkit"
"""The `towline-step` distribution's directory: its own pyproject.toml, readme and the `towline_step` package."""
EDITOR_SCHEMA = Path("schemas") / "workflow.schema.json"
"""The editor schema in the checkout; the release publishes it under its own name."""
RUNNER_ENV = "TOWLINE_RUNNER_IMAGE"
"""The operator's setting for the image step Jobs run (the chart's runner.image, or its default)."""

_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
# The prereleases a Python version (PEP 440) can say too: 1.2.0-rc.1 is 1.2.0rc1 there.
_PRERELEASE = re.compile(r"(alpha|beta|rc)(?:\.?(?:0|[1-9]\d*))?")


class PackagingFailed(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """A tool failed or an artifact is not what it must be; the message says which and why."""


# The checks: pure, each a message naming what to fix, or None.

def version_problem(version: str) -> str | None:
    """Why `version` cannot be a release's version (semver x.y.z[-prerelease]), or None."""
    example = "e.g. VERSION=0.2.0 or VERSION=0.2.0-rc.1"
    if not version:
        return f"VERSION is not set: run `make release VERSION=x.y.z` ({example})"
    match = _SEMVER.fullmatch(version)
    if match is None:
        return (f"VERSION={version} is not a semantic version: use x.y.z or x.y.z-prerelease, "
                f"without a leading v ({example})")
    if match["build"] is not None:
        return (f"VERSION={version} has build metadata (+{match['build']}), which an image tag cannot "
                f"hold: drop it ({example})")
    if match["pre"] is not None and _PRERELEASE.fullmatch(match["pre"]) is None:
        return (f"VERSION={version}: the prerelease must be alpha, beta or rc with an optional number "
                f"(-rc.1, -beta.2), the kinds the Python package's version can say too ({example})")
    return None


def changelog_heading(text: str, version: str) -> str | None:
    """CHANGELOG.md's `## [version]` heading line, or None when it has no section for `version`."""
    match = re.search(rf"^## \[{re.escape(version)}\](?:[ \t].*)?$", text, re.MULTILINE)
    return match[0] if match else None


def changelog_problem(text: str | None, version: str) -> str | None:
    """Why CHANGELOG.md (None: there is none) does not let `version` be released, or None."""
    if text is None:
        return f"CHANGELOG.md is missing: create it with a `## [{version}] - YYYY-MM-DD` section"
    if changelog_heading(text, version) is None:
        return (f"CHANGELOG.md has no section for {version}: add `## [{version}] - YYYY-MM-DD` "
                "saying what changed (Added, Changed, Fixed, ...), then run the release again")
    return None


def pyproject_with_version(text: str, version: str) -> str:
    """pyproject.toml's text with its static [project] version set to `version`; nothing else changes."""
    project = re.search(r"^\[project\][ \t]*$", text, re.MULTILINE)
    if project is None:
        raise PackagingFailed("pyproject.toml has no [project] table")
    following = re.compile(r"^\[", re.MULTILINE).search(text, project.end())
    end = following.start() if following else len(text)
    table, count = re.subn(r'^version[ \t]*=[ \t]*"[^"\n]*"', f'version = "{version}"', text[project.end():end],
                           count=1, flags=re.MULTILINE)
    if count != 1:
        raise PackagingFailed('pyproject.toml\'s [project] table has no static `version = "..."` line')
    rewritten = text[:project.end()] + table + text[end:]
    if tomllib.loads(rewritten)["project"]["version"] != version:
        raise PackagingFailed("setting the version in pyproject.toml did not give the version")
    return rewritten


def step_kit_pinned(text: str, version: str) -> str:
    """The operator's pyproject.toml text with its `towline-step==...` dependency set to `version`: the
    release's two distributions install together only at the same version."""
    rewritten, count = re.subn(r'"towline-step==[^"\s]*"', f'"towline-step=={version}"', text)
    pinned = [dependency for dependency in tomllib.loads(rewritten)["project"]["dependencies"]
              if dependency.startswith("towline-step")]
    if count != 1 or pinned != [f"towline-step=={version}"]:
        raise PackagingFailed('pyproject.toml\'s [project] dependencies need one "towline-step==..." pin')
    return rewritten


def packaged_chart_problem(chart: Mapping[str, Any], version: str) -> str | None:
    """Why the packaged chart's Chart.yaml is not the release's (version and appVersion), or None."""
    found = {key: str(chart.get(key)) for key in ("version", "appVersion")}
    wrong = [f"{key} is {value!r}" for key, value in found.items() if value != version]
    return f"the packaged Chart.yaml should say {version}, but its {', '.join(wrong)}" if wrong else None


def editor_schema_problem(committed: str | None, generated: str) -> str | None:
    """Why the checkout's editor schema (None: there is none) cannot be released as it is, or None.

    The release publishes the checkout's file, and the examples' modelines name that file: it must be
    what `make schemas` generates from the models being released.
    """
    if committed is None:
        return f"{EDITOR_SCHEMA} is missing: run `make schemas` and commit it"
    if committed != generated:
        return f"{EDITOR_SCHEMA} is not what the models generate: run `make schemas` and commit the result"
    return None


def copy_editor_schema(root: Path, out: Path) -> Path:
    """The checkout's editor schema into `out`, refused when it is missing or stale."""
    source = root / EDITOR_SCHEMA
    committed = source.read_text(encoding="utf-8") if source.is_file() else None
    problem = editor_schema_problem(committed, render(workflow_schema()))
    if problem:
        raise PackagingFailed(problem)
    target = out / EDITOR_SCHEMA.name
    shutil.copyfile(source, target)
    return target


@dataclass(frozen=True)
class ReleaseImage:
    """One image of the release: its reference, the local build it is, the archive's name."""

    reference: str
    built_as: str
    archive_name: str


def release_images(values: Mapping[str, Any], version: str) -> list[ReleaseImage]:
    """The operator image at the chart's `image.repository`, and the runner image beside it."""
    repository = values["image"]["repository"]
    return [
        ReleaseImage(f"{repository}:{version}", TOWLINE_IMAGE, f"towline-{version}.oci.tar"),
        ReleaseImage(f"{repository}-runner:{version}", RUNNER_IMAGE, f"towline-runner-{version}.oci.tar"),
    ]


_POD_SPEC = {"Deployment": ("spec", "template", "spec"), "StatefulSet": ("spec", "template", "spec"),
             "DaemonSet": ("spec", "template", "spec"), "Job": ("spec", "template", "spec"), "Pod": ("spec",)}


def rendered_images(documents: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Every image a rendered chart runs, by where it is set: each container's image, and the
    runner image the operator gives step Jobs (its TOWLINE_RUNNER_IMAGE)."""
    found: dict[str, str] = {}
    for document in documents:
        path = _POD_SPEC.get(document.get("kind", ""))
        if path is None:
            continue
        spec: Mapping[str, Any] = document
        for key in path:
            spec = spec.get(key) or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            where = f"{document['kind']} {document['metadata']['name']}, container {container['name']}"
            found[where] = container["image"]
            for variable in container.get("env") or []:
                if variable.get("name") == RUNNER_ENV:
                    found[f"{where}, {RUNNER_ENV}"] = variable.get("value", "")
    return found


def rendered_images_problem(found: Mapping[str, str], images: Sequence[ReleaseImage]) -> str | None:
    """Why the chart's default images are not the release's (`images` as release_images gives them,
    the operator's first), or None."""
    allowed = {image.reference for image in images}
    foreign = [f"{where}: {image}" for where, image in found.items() if image not in allowed]
    if foreign:
        return "the packaged chart runs images that are not the release's:\n  " + "\n  ".join(foreign)
    if images[0].reference not in found.values():
        return f"the packaged chart does not run the operator image {images[0].reference}"
    if not any(where.endswith(RUNNER_ENV) for where in found):
        return f"the packaged chart sets no {RUNNER_ENV} for step Jobs"
    return None


def manifest_digest(index: Mapping[str, Any]) -> str:
    """The digest of the one image manifest an OCI index points to (what a registry calls the image's digest)."""
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        raise PackagingFailed(f"expected one image in the OCI index, found {len(manifests)}")
    digest: str = manifests[0]["digest"]
    return digest


def images_text(digests: Mapping[str, str]) -> str:
    """images.txt: one `reference digest` line per image."""
    return "".join(f"{reference} {digest}\n" for reference, digest in digests.items())


def sha256sums_text(sums: Mapping[str, str]) -> str:
    """SHA256SUMS in the form `sha256sum --check` reads: `<hex>  <file name>`, sorted by name."""
    return "".join(f"{sums[name]}  {name}\n" for name in sorted(sums))


# The builds: each runs one tool into the staging directory.

def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _run(argv: Sequence[str], what: str, *, env: Mapping[str, str] | None = None, timeout: float = 600) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, env=None if env is None else dict(env),
                            timeout=timeout, check=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip().splitlines()
        raise PackagingFailed(f"{what} failed (exit {result.returncode}):\n" + "\n".join(output[-30:]))
    return result.stdout


def package_chart(helm: Path, chart: Path, version: str, out: Path) -> Path:
    """`helm package` with version and appVersion set (in the package, not in the checkout)."""
    _run([str(helm), "package", str(chart), "--version", version, "--app-version", version,
          "--destination", str(out)], "helm package")
    package = out / f"{CHART_NAME}-{version}.tgz"
    with tarfile.open(package) as tar:
        member = tar.extractfile(f"{CHART_NAME}/Chart.yaml")
        if member is None:
            raise PackagingFailed(f"{package.name} holds no {CHART_NAME}/Chart.yaml")
        problem = packaged_chart_problem(yaml.safe_load(member.read()), version)
    if problem:
        raise PackagingFailed(problem)
    return package


def check_chart_images(helm: Path, package: Path, images: Sequence[ReleaseImage]) -> dict[str, str]:
    """Render the package with its defaults; its images must be the release's. Returns what it runs where."""
    # --kube-version: the pinned helm is built without the ldflags that tell it Kubernetes'
    # version, so it assumes 1.20, older than the chart's kubeVersion; the tests pass it too.
    rendered = _run([str(helm), "template", "towline", str(package), "--namespace", "towline-system",
                     "--kube-version", KUBERNETES_VERSION], "helm template of the packaged chart")
    found = rendered_images(d for d in yaml.safe_load_all(rendered) if d)
    problem = rendered_images_problem(found, images)
    if problem:
        raise PackagingFailed(problem)
    return found


def retag_archive(source: Path, target: Path, reference: str) -> str:
    """Write `source`'s image to `target` named `reference` (a new index; the manifest and its
    blobs unchanged, so the digest is the built image's); return the manifest's digest."""
    with tempfile.TemporaryDirectory(prefix=".layout-", dir=target.parent) as scratch:
        layout = Path(scratch)
        with tarfile.open(source) as tar:
            tar.extractall(layout, filter="data")
        digest = manifest_digest(json.loads((layout / "index.json").read_text()))
        write_archive(layout, target, reference)
    image = read_archive(target)  # checks the manifest and config against their digests
    if image.reference != reference:
        raise PackagingFailed(f"{target.name} names {image.reference!r}, not {reference!r}")
    return digest


def python_source_files(root: Path, project: str = ".") -> list[str]:
    """The checkout's files a Python distribution is built from (caches and build debris excluded): the
    operator's (`project` "."), or the step kit's (`project` STEP_KIT, its directory)."""
    if project != ".":
        return [name for name in context_files(root) if name.startswith(f"{project}/")]
    return [name for name in context_files(root) if name.split("/", 1)[0] in PYTHON_SOURCES]


def build_python(root: Path, version: str, out: Path, project: str = ".") -> list[Path]:
    """The sdist, and the wheel built from it (so a file the sdist lacks fails here), at `version`, of the
    distribution whose pyproject.toml is in `project` (the operator's, or STEP_KIT).

    From a copy whose pyproject.toml says `version`; the build backend's own tools (setuptools,
    wheel) at the versions images/constraints.txt pins, as in the images.
    """
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    with tempfile.TemporaryDirectory(prefix="towline-python-") as scratch:
        staged = Path(scratch) / "towline"
        stage_files(root, python_source_files(root, project), staged)
        source = staged / project
        pyproject = source / "pyproject.toml"
        text = pyproject_with_version(pyproject.read_text(), version)
        pyproject.write_text(step_kit_pinned(text, version) if project == "." else text)
        env = {**os.environ, "PIP_CONSTRAINT": str(root / "images" / "constraints.txt")}
        _run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], "python -m build", env=env)
    built = sorted(set(out.iterdir()) - before)
    if sorted(path.suffix for path in built) != [".gz", ".whl"]:
        raise PackagingFailed(f"python -m build should give one sdist and one wheel, gave {[p.name for p in built]}")
    return built


@dataclass(frozen=True)
class Release:
    version: str
    files: list[Path]
    digests: dict[str, str]
    chart_images: dict[str, str]
    seconds: float


def build_release(version: str, dist: Path, progress: Progress, *,
                  python: PythonBuilder = build_python) -> Release:
    """Every artifact of `version` into `dist` (emptied first); a failure leaves `dist` as it was.

    `python` builds the sdists and wheels as `build_python` does (tests hand it the build cache's copies)."""
    started = time.monotonic()
    helm = find_binaries(progress=progress).path("helm")
    values = yaml.safe_load((REPO_ROOT / CHART / "values.yaml").read_text())
    images = release_images(values, version)
    dist.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".partial-{version}-", dir=dist))
    try:
        progress(f"editor schema: {EDITOR_SCHEMA}")
        copy_editor_schema(REPO_ROOT, staging)
        progress(f"chart: helm package {CHART} as {version}")
        chart = package_chart(helm, REPO_ROOT / CHART, version, staging)
        chart_images = check_chart_images(helm, chart, images)
        progress("images: the operator and runner images of this checkout (built first if the cache lacks them)")
        archives = ensure_towline_images(progress)
        digests: dict[str, str] = {}
        for image in images:
            progress(f"images: {image.built_as} as {image.reference}")
            digests[image.reference] = retag_archive(archives[image.built_as], staging / image.archive_name,
                                                     image.reference)
        progress(f"python: sdist and wheel at {version} (python -m build)")
        python(REPO_ROOT, version, staging, ".")
        progress(f"python: the step kit's sdist and wheel (towline-step, {STEP_KIT}/) at {version}")
        python(REPO_ROOT, version, staging, STEP_KIT)
        (staging / "images.txt").write_text(images_text(digests))
        sums = {path.name: file_sha256(path) for path in staging.iterdir() if path.is_file()}
        (staging / "SHA256SUMS").write_text(sha256sums_text(sums))
        files = _publish(staging, dist)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Release(version, files, digests, chart_images, time.monotonic() - started)


def _publish(staging: Path, dist: Path) -> list[Path]:
    """dist/ holds this release's files and nothing else."""
    for entry in dist.iterdir():
        if entry == staging:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    files = []
    for path in sorted(staging.iterdir()):
        if path.is_file():
            files.append(path.replace(dist / path.name))
    return files


def uncommitted_changes(root: Path) -> list[str]:
    """`git status --porcelain` of the checkout ([] when it is not a git checkout)."""
    try:
        result = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True,
                                text=True, timeout=60, check=False)
    except OSError:
        return []
    return result.stdout.splitlines() if result.returncode == 0 else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m towline_dev.packaging", description=__doc__.splitlines()[0])
    parser.add_argument("version", nargs="?", default="", help="the release's version, x.y.z[-prerelease]")
    parser.add_argument("--dist", type=Path, default=REPO_ROOT / "dist", help="where the artifacts go (emptied)")
    args = parser.parse_args(argv)

    def report(message: str) -> None:
        print(f"[towline release] {message}", file=sys.stderr, flush=True)

    changelog = REPO_ROOT / "CHANGELOG.md"
    changelog_text = changelog.read_text() if changelog.is_file() else None
    problem = version_problem(args.version) or changelog_problem(changelog_text, args.version)
    if problem:
        print(f"make release: {problem}", file=sys.stderr)
        return 2
    heading = changelog_heading(changelog_text or "", args.version) or ""
    if "unreleased" in heading.lower():
        report(f"note: CHANGELOG.md still says {heading!r}; give it the release date when you tag it")
    changes = uncommitted_changes(REPO_ROOT)
    if changes:
        report(f"warning: {len(changes)} uncommitted change(s) in the checkout; these artifacts are built "
               "from the working tree, not from a commit")
    try:
        release = build_release(args.version, args.dist, report)
    except PackagingFailed as failure:
        print(f"make release: {failure}", file=sys.stderr)
        return 1
    print(f"Towline {release.version} in {args.dist} ({release.seconds:.0f} s):")
    for path in release.files:
        print(f"  {path.name:<40} {path.stat().st_size:>12,} bytes")
    print("Images (reference, manifest digest):")
    for reference, digest in release.digests.items():
        print(f"  {reference} {digest}")
    print("The packaged chart's default images:")
    for where, image in release.chart_images.items():
        print(f"  {where}: {image}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
