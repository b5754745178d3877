"""Releases built once per content, for tests that need `dist/` as `make release` leaves it.

`make release VERSION=x.y.z` rebuilds the chart package and the wheel every time (about a
minute, mostly the wheel) and empties the checkout's `dist/`. A test that follows the README
with a release in hand wants neither: `ensure_release` builds the very same artifacts
(`packaging.build_release`, everything `make release` does after checking the version and the
changelog) into the cache, under a key of everything they are made from (the images' inputs,
the chart, the pinned helm, the version), and hands back that directory. The checkout is
never written to.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.binaries import _exclusive_lock, cache_root
from towline_dev.distcache import copy_python_dists
from towline_dev.imagebuild import content_key, published_build
from towline_dev.images import context_files, pinned_inputs
from towline_dev.packaging import CHART, build_release
from towline_dev.versions import HELM_VERSION

Progress = Callable[[str], None]

KEY_FORMAT = 1
"""Bump when what a cached release holds changes."""
KEEP = 4
"""Cached releases kept (the most recently used); older ones are dropped."""


@dataclass(frozen=True)
class CachedRelease:
    version: str
    directory: Path
    """Holds exactly what `make release` leaves in dist/ for this version."""
    built_seconds: float | None
    """How long building it took, or None when it came from the cache."""


def releases_cache() -> Path:
    return cache_root() / "releases"


def release_inputs(root: Path = REPO_ROOT) -> list[str]:
    """The repository-relative files a release is made from: the images' (the Python sources among
    them) and the chart's."""
    chart = [path.relative_to(root).as_posix() for path in (root / CHART).rglob("*") if path.is_file()]
    return sorted({*context_files(root), *chart})


def release_key(version: str, root: Path = REPO_ROOT) -> str:
    pins = {"format": KEY_FORMAT, "version": version, "images": pinned_inputs(), "helm": HELM_VERSION}
    return content_key(root, release_inputs(root), pins)


def ensure_release(version: str, progress: Progress) -> CachedRelease:
    """`version`'s release of the current sources, built into the cache once."""
    cache = releases_cache()
    target = cache / f"{version}-{release_key(version)}"
    if (target / "SHA256SUMS").is_file():
        with contextlib.suppress(OSError):
            os.utime(target)
        return CachedRelease(version, target, None)
    with _exclusive_lock(cache / "build.lock"):
        if (target / "SHA256SUMS").is_file():
            return CachedRelease(version, target, None)
        started = time.monotonic()
        with published_build(target, prefix=f".{version}-") as staging:
            build_release(version, staging, progress, python=_cached_python)
        _drop_old(cache, keep=target)
        return CachedRelease(version, target, time.monotonic() - started)


def _cached_python(root: Path, version: str, out: Path, project: str) -> list[Path]:
    """The release's sdists and wheels from the build cache (`towline_dev.distcache`), which the tests that
    install a wheel share: the same files `build_python` would make from these sources."""
    return copy_python_dists(version, out, project, root)


def _drop_old(cache: Path, *, keep: Path) -> None:
    built = sorted((p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".") and p != keep),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for old in built[KEEP - 1:]:
        shutil.rmtree(old, ignore_errors=True)
