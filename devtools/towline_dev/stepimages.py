"""Build, once, the images of the example step types (examples/step-types/) as OCI archives in the cache.

`ensure_step_type_images(progress)` returns {image reference: archive path}, archives
`ctr -n k8s.io images import` reads, like `towline_dev.images` (which calls it):

- `localhost/towline-steps/tcp-probe:dev`, the Go example: this machine's Go compiles a
  static binary (CGO off, `-trimpath -ldflags=-s -w`, GOPROXY=off since its go.mod requires
  nothing, GOCACHE under the cache directory), then the example's own Containerfile puts
  it alone into an empty image (`FROM scratch`, uid 65532).
- `localhost/towline-steps/greeter:dev`, the Python SDK example, from
  `images/step-greeter.Containerfile` on the runner's Debian base: a venv with the step kit's
  `towline-step` distribution (stepkit/, with pydantic at the runner's pin) and the example.
  Built only when the tree holds stepkit/ and `examples/step-types/greeter-python`; until then
  it is left out.

Each image has its own content key (the files its build reads, the pinned tools, the Go
toolchain's version and architecture, the base), its own cache directory and the same
file lock as the operator's images; an unchanged tree reuses the archive without running
anything. Builds run from a staged copy of exactly the hashed files.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.binaries import _exclusive_lock
from towline_dev.debpackages import ensure_debian_packages
from towline_dev.imagebuild import (
    BuildahStore,
    ImageBuildFailed,
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
from towline_dev.versions import IMAGE_TOOL_PACKAGES

Progress = Callable[[str], None]

STEP_KEY_FORMAT = 1
"""Bump when the way the step-type images are assembled changes."""
KEEP_BUILDS = 2
"""Builds kept per image (the newest), so switching between two branches does not rebuild each time."""
_IGNORED_DIRECTORIES = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist", "tests"}
_IGNORED_SUFFIXES = (".pyc", ".pyo", ".egg-info", "_test.go", ".md")


@dataclass(frozen=True)
class StepImage:
    """One example step type's image: what it is called, what builds it, what it reads."""

    name: str
    reference: str
    containerfile: str
    """Repository-relative."""
    context: str
    """The repository-relative directory sent as the build context ("." is the root)."""
    sources: tuple[str, ...]
    """Repository-relative files and directories the build reads: hashed, staged, nothing else."""
    go_binary: str | None = None
    """Compiled by Go from the package at `context` into this file of the context before the build."""
    on_base: bool = False
    """Built FROM the local Debian base (`BASE`); pip inside trusts the machine's CA bundle."""

    @property
    def archive_name(self) -> str:
        return f"towline-step-{self.name}.oci.tar"


TCP_PROBE = StepImage(
    name="tcp-probe",
    reference="localhost/towline-steps/tcp-probe:dev",
    containerfile="examples/step-types/tcp-probe-go/Containerfile",
    context="examples/step-types/tcp-probe-go",
    sources=("examples/step-types/tcp-probe-go",),
    go_binary="tcp-probe",
)
GREETER = StepImage(
    name="greeter",
    reference="localhost/towline-steps/greeter:dev",
    containerfile="images/step-greeter.Containerfile",
    context=".",
    sources=(
        "images/step-greeter.Containerfile",
        "images/step-greeter.Containerfile.dockerignore",
        "images/constraints.txt",
        "stepkit/pyproject.toml",
        "stepkit/README.md",
        "stepkit/towline_step",
        "examples/step-types/greeter-python",
    ),
    on_base=True,
)
STEP_IMAGES = (TCP_PROBE, GREETER)
TCP_PROBE_IMAGE = TCP_PROBE.reference
GREETER_IMAGE = GREETER.reference


def available(spec: StepImage, root: Path = REPO_ROOT) -> bool:
    """Whether the tree holds everything the image is built from (the SDK example arrives separately)."""
    return all((root / source).exists() for source in spec.sources)


def source_files(spec: StepImage, root: Path = REPO_ROOT) -> list[str]:
    """The repository-relative files the build reads, sorted: build debris, tests, docs and the binary excluded."""
    found: list[str] = []
    for source in spec.sources:
        path = root / source
        if path.is_file():
            found.append(source)
            continue
        if not path.is_dir():
            raise FileNotFoundError(f"{root} lacks {source}, which {spec.reference} is built from")
        for file in path.rglob("*"):
            relative = file.relative_to(root)
            if any(part in _IGNORED_DIRECTORIES or part.endswith(_IGNORED_SUFFIXES) for part in relative.parts):
                continue
            if spec.go_binary and relative == Path(spec.context, spec.go_binary):
                continue  # a binary someone built in place is an output, never an input
            if file.is_file() and not file.is_symlink():
                found.append(relative.as_posix())
    return sorted(set(found))


def go_toolchain() -> str | None:
    return shutil.which("go")


def go_env(environ: Mapping[str, str], cache: Path) -> dict[str, str]:
    """The Go build's environment: nothing of the caller's GO* settings (the key would not see them),
    no network (the example requires no module), caches under the cache directory."""
    env = {name: value for name, value in environ.items() if not name.startswith(("GO", "CGO_"))}
    env.update(
        CGO_ENABLED="0", GOOS="linux", GOFLAGS="-buildvcs=false", GOTOOLCHAIN="local", GOPROXY="off",
        GOWORK="off", GOCACHE=str(cache / "go-build"), GOMODCACHE=str(cache / "go-mod"),
    )
    return env


def go_build_command(go: str, package: Path, output: Path) -> list[str]:
    """A static, stripped binary without this machine's paths in it."""
    return [go, "-C", str(package), "build", "-trimpath", "-ldflags=-s -w", "-o", str(output), "."]


@functools.cache
def go_version(go: str) -> tuple[str, str]:
    """(GOVERSION, GOARCH) of the toolchain as the build runs it: part of the Go image's key."""
    result = subprocess.run([go, "env", "GOVERSION", "GOARCH"], env=go_env(os.environ, images_cache()),
                            capture_output=True, text=True, check=False, timeout=60)
    lines = result.stdout.split()
    if result.returncode != 0 or len(lines) != 2:
        raise ImageBuildFailed(f"`{go} env GOVERSION GOARCH` failed: {result.stderr.strip()}")
    return lines[0], lines[1]


def pinned_inputs(spec: StepImage, go: str | None) -> dict[str, object]:
    """Everything besides the files that decides what the image contains."""
    pins: dict[str, object] = {
        "format": STEP_KEY_FORMAT,
        "image": [spec.reference, spec.containerfile, spec.context],
        "tools": {name: pin.version for name, pin in sorted(IMAGE_TOOL_PACKAGES.items())},
    }
    if spec.go_binary:
        if go is None:
            raise ImageBuildFailed(
                f"{spec.reference} is a Go program and Go is not installed; install Go 1.22 or newer "
                "(the local node's binaries are built with it too)"
            )
        pins["go"] = list(go_version(go))
    if spec.on_base:
        pins["base"] = base_key()
    return pins


def build_directory(spec: StepImage) -> Path:
    return images_cache() / "step-types" / spec.name


def ensure_step_type_images(progress: Progress, root: Path = REPO_ROOT) -> dict[str, Path]:
    """The archives of the example step types in the tree at `root`, built (once per change) if the cache
    lacks them."""
    archives: dict[str, Path] = {}
    go = go_toolchain()
    for spec in STEP_IMAGES:
        if not available(spec, root):
            continue
        files = source_files(spec, root)
        pins = pinned_inputs(spec, go)
        target = build_directory(spec) / content_key(root, files, pins)
        archive = target / spec.archive_name
        if not archive.is_file():
            with _exclusive_lock(images_cache() / "build.lock"):
                if not archive.is_file():
                    _build(spec, root, files, pins, target, go, progress)
        with contextlib.suppress(OSError):
            os.utime(target)  # most recently used: the last to be dropped
        archives[spec.reference] = archive
    return archives


def _build(  # noqa: PLR0917 - private, called from one place
    spec: StepImage, tree: Path, files: list[str], pins: dict[str, object], target: Path, go: str | None,
    progress: Progress,
) -> None:
    ensure_debian_packages(IMAGE_TOOL_PACKAGES, progress, purpose="building the container images")
    started = time.monotonic()
    key = target.name
    progress(f"Building the example step type image {spec.reference} into {target} (once per change to it)")
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    store = BuildahStore(images_cache() / "buildah")
    store.tmp.mkdir(parents=True, exist_ok=True)
    log = directory / f"build-{key}.log"
    log.unlink(missing_ok=True)
    base = ensure_base(store, progress, log) if spec.on_base else None
    with published_build(target, prefix=f"{key}-") as staging:
        root = staging / "context"
        stage_files(tree, files, root)
        if content_key(root, files, pins) != key:
            # The archive is filed under the key: it must hold exactly what the key hashed.
            raise ImageBuildFailed("the sources changed while the build was staging them; run it again")
        context = root / spec.context
        if spec.go_binary:
            assert go is not None  # pinned_inputs refused a Go image without Go
            label = f"{spec.reference}: go build"
            progress(label)
            run_logged(go_build_command(go, context, context / spec.go_binary), progress, label,
                       env=go_env(os.environ, images_cache()), log=log)
        progress(f"{spec.reference}: building from {spec.containerfile}")
        build_archive(store, containerfile=root / spec.containerfile, context=context, base=base,
                      reference=spec.reference, ca_bundle=host_ca_bundle(os.environ) if spec.on_base else None,
                      archive=staging / spec.archive_name, progress=progress, label=spec.reference, log=log)
        shutil.rmtree(root)
        write_build_manifest(staging, {"key": key, "reference": spec.reference, "files": files, "pins": pins,
                                       "base": base, "seconds": round(time.monotonic() - started, 1)})
    run_logged(prune_command(store), progress, "pruning superseded images", env=store.env(), log=log)
    drop_other_builds(directory, keep=target, count=KEEP_BUILDS)
    size = (target / spec.archive_name).stat().st_size / 1e6
    progress(f"Built {spec.reference} in {time.monotonic() - started:.0f} s: {spec.archive_name} {size:.1f} MB")
