"""ORY Hydra, the tests' OpenID Connect provider: found in the cache, else built once from the Go module proxy.

Hydra's go.mod replaces two modules. Go ignores a dependency's replaces, so a wrapper module repeats the ones
that name another module (its fork of pop); the one that names a directory inside Hydra's repository (its
generated API client) is left out, and the client's published release that Hydra requires is used. The SQLite
store needs cgo and the `sqlite` build tag (Hydra's own release build sets both): the provider runs with
`dsn: memory`, so a start leaves no database behind.
"""

from __future__ import annotations

import re
from pathlib import Path

from towline_dev.binaries import (
    Progress,
    _go_env,
    _module_gomod,
    _run_go,
    _stderr_progress,
    _wrapper_gomod,
    cache_root,
    go_build_once,
)
from towline_dev.versions import HYDRA_VERSION

MODULE = "github.com/ory/hydra/v2"
BUILD_TAGS = "sqlite,sqlite_omit_load_extension"
_REPLACE = re.compile(r"^\s*(?:replace\s+)?(\S+)\s+=>\s+(\S+)(?:\s+(\S+))?\s*$")


def cached_hydra() -> Path:
    """Where Hydra of the pinned version lives once built."""
    return cache_root() / f"hydra-{HYDRA_VERSION}" / "bin" / "hydra"


def module_replaces(gomod: str) -> dict[str, str]:
    """The replaces of a go.mod that name another module (`old => new version`), to repeat in a wrapper module;
    a replace by a directory (`=> ./path`) is left out: a module's directories are not part of its download."""
    replaces: dict[str, str] = {}
    in_block = False
    for line in gomod.splitlines():
        stripped = line.split("//", 1)[0].strip()
        if stripped.startswith("replace ("):
            in_block = True
            continue
        if in_block and stripped == ")":
            in_block = False
            continue
        if not (in_block or stripped.startswith("replace ")):
            continue
        found = _REPLACE.match(stripped)
        if found is None or found.group(2).startswith((".", "/")) or found.group(3) is None:
            continue
        replaces[found.group(1)] = f"{found.group(2)} {found.group(3)}"
    return replaces


def find_hydra(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """The pinned Hydra from the cache, built there once (13 s with Go's caches warm, about 100 s the first time;
    docs/web-view.md)."""
    label = f"hydra {HYDRA_VERSION}"

    def make(go: str, staging: Path) -> Path:
        work = cached_hydra().parent.parent / "src"
        work.mkdir(parents=True, exist_ok=True)
        replaces = module_replaces(_module_gomod(go, MODULE, HYDRA_VERSION, work))
        (work / "go.mod").write_text(
            _wrapper_gomod("towline.local/hydra-binary", f"{MODULE} {HYDRA_VERSION}", replaces)
        )
        (work / "go.sum").write_text("")
        _run_go([go, "get", f"{MODULE}@{HYDRA_VERSION}"], work, progress, f"{label}: resolving dependencies")
        ldflags = f"-s -w -X {MODULE}/driver/config.Version={HYDRA_VERSION}"
        _run_go(
            [go, "build", "-v", "-trimpath", "-tags", BUILD_TAGS, "-ldflags", ldflags, "-o", str(staging / "hydra"),
             MODULE],
            work, progress, f"{label}: compiling", env=_go_env(CGO_ENABLED="1"),
        )
        return staging / "hydra"

    return go_build_once(cached_hydra(), label, make, build=build, progress=progress)
