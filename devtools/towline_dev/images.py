"""Build, once, the container images the local node runs, as OCI archives in the cache.

`ensure_images(progress)` returns {image reference: archive path} for
`localhost/towline:dev` (operator and ingress), `localhost/towline-runner:dev`
(the step runner) and the example step types' images (`towline_dev.stepimages`).
Each archive is a tar of an OCI layout that `ctr -n k8s.io images import` and
skopeo's `oci-archive:` read.

The archives are cached under a content key: the hash of every file the build
reads (the Containerfiles, the constraints, pyproject.toml, README.md and the
operator, connector and step-kit sources) and of the pinned tool and base
versions. An unchanged tree reuses them; any change to those inputs builds again. Builds
run from a staged copy of exactly those files, so what is hashed is what is
built. A file lock serialises concurrent builders (two test sessions, a test
and `make dev`). The example step types' images have keys of their own, so
changing an example never rebuilds the operator's images.

`python -m towline_dev.images` builds and prints the archives;
`python -m towline_dev.images lock` regenerates images/constraints.txt.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.binaries import _exclusive_lock
from towline_dev.debpackages import ensure_debian_packages
from towline_dev.imagebuild import (
    BuildahStore,
    SourcesChanged,
    base_key,
    build_archive,
    content_key,
    drop_other_builds,
    ensure_base,
    host_ca_bundle,
    images_cache,
    prune_command,
    published_build,
    run_logged,
    stage_files,
    write_build_manifest,
)
from towline_dev.stepimages import ensure_step_type_images
from towline_dev.versions import IMAGE_BUILD_TOOLS, IMAGE_TOOL_PACKAGES

Progress = Callable[[str], None]

TOWLINE_IMAGE = "localhost/towline:dev"
RUNNER_IMAGE = "localhost/towline-runner:dev"
KEY_FORMAT = 1
"""Bump when the cache layout or the way images are assembled changes."""

CONTEXT_PATHS = ("pyproject.toml", "README.md", "images", "operator", "connectors", "stepkit", "examples")
"""Everything the Containerfiles may COPY; the build context holds nothing else."""
CONTEXT_ONLY = {"examples": "*.yaml"}
"""Of these directories only the files the pattern matches, not below: the top-level examples the operator's wheel
ships for the web view's editor (the step types' and code steps' sources beside them are no image's input)."""
STEP_IMAGE_FILES = "images/step-"
"""The example step types' Containerfiles (towline_dev.stepimages): not inputs of these two images."""
_IGNORED_DIRECTORIES = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist"}
_IGNORED_SUFFIXES = (".pyc", ".pyo", ".egg-info")


@dataclass(frozen=True)
class ImageSpec:
    reference: str
    containerfile: str
    archive_name: str


IMAGES = (
    ImageSpec(TOWLINE_IMAGE, "images/towline.Containerfile", "towline.oci.tar"),
    ImageSpec(RUNNER_IMAGE, "images/runner.Containerfile", "towline-runner.oci.tar"),
)


def context_files(root: Path = REPO_ROOT) -> list[str]:
    """The repository-relative files a build reads, sorted; caches and build debris excluded."""
    found: list[str] = []
    for entry in CONTEXT_PATHS:
        path = root / entry
        if path.is_file():
            found.append(entry)
            continue
        for file in path.glob(CONTEXT_ONLY[entry]) if entry in CONTEXT_ONLY else path.rglob("*"):
            relative = file.relative_to(root)
            if any(part in _IGNORED_DIRECTORIES or part.endswith(_IGNORED_SUFFIXES) for part in relative.parts):
                continue
            if relative.as_posix().startswith(STEP_IMAGE_FILES):
                continue
            if file.is_file() and not file.is_symlink():
                found.append(relative.as_posix())
    missing = [entry for entry in CONTEXT_PATHS if not (root / entry).exists()]
    if missing:
        raise FileNotFoundError(f"{root} is not a Towline checkout: {', '.join(missing)} missing")
    return sorted(found)


def pinned_inputs() -> dict[str, object]:
    """Everything besides the files that decides what the images contain."""
    return {
        "format": KEY_FORMAT,
        "images": [(spec.reference, spec.containerfile) for spec in IMAGES],
        "base": base_key(),
        "tools": {name: pin.version for name, pin in sorted(IMAGE_TOOL_PACKAGES.items())},
        "buildTools": dict(sorted(IMAGE_BUILD_TOOLS.items())),
    }


def archive_paths(directory: Path) -> dict[str, Path]:
    return {spec.reference: directory / spec.archive_name for spec in IMAGES}


def ensure_images(progress: Progress) -> dict[str, Path]:
    """The archives of the current sources, built (once) if the cache lacks them: the operator and
    runner images, and the example step types' images (`towline_dev.stepimages`), each group under
    its own content key, so a change to an example does not rebuild the operator."""
    return {**ensure_towline_images(progress), **ensure_step_type_images(progress)}


STAGING_TRIES = 3
"""Builds started again, each of the newer sources, when files change while one is staged (a checkout edited while
tests start its build); then the build fails, saying so."""


def ensure_towline_images(progress: Progress) -> dict[str, Path]:
    """The operator and runner archives of the current sources, built (once) if the cache lacks them."""
    for attempt in range(1, STAGING_TRIES + 1):
        files = context_files(REPO_ROOT)
        key = content_key(REPO_ROOT, files, pinned_inputs())
        target = images_cache() / key
        archives = archive_paths(target)
        if all(path.is_file() for path in archives.values()):
            with contextlib.suppress(OSError):
                os.utime(target)  # most recently used: the last to be dropped
            return archives
        with _exclusive_lock(images_cache() / "build.lock"):
            if all(path.is_file() for path in archives.values()):
                return archives
            try:
                _build_all(files, key, target, progress)
            except SourcesChanged:
                if attempt == STAGING_TRIES:
                    raise
                progress("the sources changed while the build was staging them; building the newer sources")
                continue
        return archives
    raise AssertionError("unreachable: the last try returns or raises")


def _build_all(files: list[str], key: str, target: Path, progress: Progress) -> None:
    started = time.monotonic()
    progress(
        f"Building the container images {', '.join(spec.reference for spec in IMAGES)} into {target} "
        "(once per change to their sources; a few minutes on 2 cores when the base and pip's cache are warm)"
    )
    log = images_cache() / f"build-{key}.log"
    log.unlink(missing_ok=True)
    with published_build(target, prefix=f"{key}-") as staging:
        base = build_archives(REPO_ROOT, files, staging, progress, log, key=key)
        write_build_manifest(staging, {"key": key, "files": len(files), "pins": pinned_inputs(), "base": base,
                                       "seconds": round(time.monotonic() - started, 1)})
    drop_other_builds(images_cache(), keep=target, count=KEEP_BUILDS)
    sizes = ", ".join(f"{p.name} {p.stat().st_size / 1e6:.0f} MB" for p in archive_paths(target).values())
    progress(f"Built the images in {time.monotonic() - started:.0f} s: {sizes}")


def build_archives(
    root: Path, files: list[str], out: Path, progress: Progress, log: Path, *,
    specs: tuple[ImageSpec, ...] = IMAGES, key: str | None = None,
) -> str:
    """Build `specs` from exactly `files` of the tree `root` into archives in `out`; returns the base used.

    The caller holds the build lock (the buildah store is shared). With `key`, the staged copy must
    still hash to it, so archives filed under a content key hold what it hashed. `root` may be another
    tree than this checkout (an older commit's export, `towline_dev.previous`): its own Containerfiles
    and sources are built, with this checkout's pinned tools and base.
    """
    ensure_debian_packages(IMAGE_TOOL_PACKAGES, progress, purpose="building the container images")
    store = BuildahStore(images_cache() / "buildah")
    store.tmp.mkdir(parents=True, exist_ok=True)
    base = ensure_base(store, progress, log)
    context = out / "context"
    stage_files(root, files, context)
    try:
        if key is not None and content_key(context, files, pinned_inputs()) != key:
            raise SourcesChanged("the sources changed while the build was staging them; run it again")
        ca_bundle = host_ca_bundle(os.environ)
        for position, spec in enumerate(specs, start=1):
            label = f"[{position}/{len(specs)}] {spec.reference}"
            progress(f"{label}: building from {spec.containerfile}")
            build_archive(store, containerfile=context / spec.containerfile, context=context, base=base,
                          reference=spec.reference, ca_bundle=ca_bundle, archive=out / spec.archive_name,
                          progress=progress, label=label, log=log)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    run_logged(prune_command(store), progress, "pruning superseded images", env=store.env(), log=log)
    return base


KEEP_BUILDS = 3
"""Builds kept per machine: the newest few, so checkouts of different branches don't rebuild in turn."""


CONSTRAINTS_HEADER = (
    "# Every Python distribution in the images, pinned (pip's PIP_CONSTRAINT).\n"
    "# Generated by `python -m towline_dev.images lock` from pyproject.toml's pins\n"
    "# (CPython 3.11, manylinux wheels); do not edit by hand.\n"
)


def lock_constraints(root: Path, python: str) -> str:
    """Resolve pyproject.toml's pins and the wheel build's tools in a fresh venv; return the constraints."""
    with tempfile.TemporaryDirectory(prefix="towline-lock-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        tools = [f"{name}=={version}" for name, version in sorted(IMAGE_BUILD_TOOLS.items())]
        # The step kit from the checkout first: the operator's towline-step pin is on no package index.
        subprocess.run([*pip, "install", "--quiet", "--only-binary=:all:", str(root / "stepkit"), str(root), *tools],
                       check=True)
        frozen = subprocess.run([*pip, "freeze", "--all", "--exclude", "towline", "--exclude", "towline-step",
                                 "--exclude", "pip"],
                                check=True, capture_output=True, text=True).stdout
    return CONSTRAINTS_HEADER + frozen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m towline_dev.images", description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=("build", "lock"), default="build")
    parser.add_argument("--python", default="python3.11", help="interpreter for `lock` (the images' Python)")
    args = parser.parse_args(argv)

    def report(message: str) -> None:
        print(f"[towline images] {message}", file=sys.stderr, flush=True)

    if args.command == "lock":
        (REPO_ROOT / "images" / "constraints.txt").write_text(lock_constraints(REPO_ROOT, args.python))
        return 0
    for reference, path in ensure_images(report).items():
        print(f"{reference}\t{path}\t{path.stat().st_size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
