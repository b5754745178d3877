"""Python distributions built once per content, for tests that install them as a user installs a release's.

`packaging.build_python` (`python -m build`: an isolated environment with setuptools and wheel for the sdist,
another for the wheel built from it) costs 10-20 s of CPU a distribution, and several tests and the README
walkthrough's releases want the very same sdist and wheel. `python_dists` builds them with `build_python` into
the cache, under a key of everything they are made from (each source file's path and bytes, the version, the
distribution, the build tools' pins and Python's version), and hands back the cached files. A change to any of
those builds again; the checkout is never written to. `make release` itself always builds afresh.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.binaries import _exclusive_lock, cache_root
from towline_dev.imagebuild import content_key, drop_other_builds, published_build, write_build_manifest
from towline_dev.packaging import build_python, python_source_files

KEY_FORMAT = 1
"""Bump when what a cached entry holds changes."""
KEEP = 8
"""Entries kept (the most recently used): two distributions at the versions the tests build, and a change or two."""
CONSTRAINTS = Path("images") / "constraints.txt"
"""The build tools' pins `build_python` builds with."""


def dists_cache() -> Path:
    return cache_root() / "python-dists"


def dist_key(version: str, project: str = ".", root: Path = REPO_ROOT) -> str:
    """What `build_python(root, version, out, project)` makes, as a digest of everything it is made from."""
    pins = {"format": KEY_FORMAT, "version": version, "project": project, "python": list(sys.version_info[:2])}
    return content_key(root, [*python_source_files(root, project), CONSTRAINTS.as_posix()], pins)


def python_dists(version: str, project: str = ".", root: Path = REPO_ROOT) -> list[Path]:
    """The sdist and the wheel of `project` at `version` built from the current sources, built once; sorted."""
    cache = dists_cache()
    name = "towline" if project == "." else project
    target = cache / f"{name}-{version}-{dist_key(version, project, root)}"
    if (target / "build.json").is_file():
        with contextlib.suppress(OSError):
            os.utime(target)
        return _built(target)
    with _exclusive_lock(cache / "build.lock"):
        if not (target / "build.json").is_file():
            with published_build(target, prefix=f".{name}-{version}-") as staging:
                built = build_python(root, version, staging, project)
                write_build_manifest(staging, {"version": version, "project": project,
                                               "files": [path.name for path in built]})
            drop_other_builds(cache, target, KEEP)
    return _built(target)


def copy_python_dists(version: str, out: Path, project: str = ".", root: Path = REPO_ROOT) -> list[Path]:
    """`python_dists` copied into `out` (as `build_python` leaves them there); the copies, sorted."""
    out.mkdir(parents=True, exist_ok=True)
    return sorted(Path(shutil.copy2(path, out / path.name)) for path in python_dists(version, project, root))


def _built(target: Path) -> list[Path]:
    return sorted(path for path in target.iterdir() if path.suffix in {".whl", ".gz"})
