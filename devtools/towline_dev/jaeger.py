"""Jaeger, the tracing tests' collector: found in the cache, else built once from the Go module proxy.

Its all-in-one command takes OTLP over HTTP and gRPC, keeps spans in memory and answers the query API
(`/api/traces/{id}`), which is all a test needs to read back what the operator exported. Jaeger's go.mod
replaces one module, which `go install module@version` refuses, so a wrapper module repeats the replace
(as towline_dev.idp.hydra does for Hydra).
"""

from __future__ import annotations

import sys
from pathlib import Path

from towline_dev.binaries import (
    Progress,
    _module_gomod,
    _run_go,
    _stderr_progress,
    _wrapper_gomod,
    cache_root,
    go_build_once,
)
from towline_dev.idp.hydra import module_replaces
from towline_dev.versions import JAEGER_VERSION

MODULE = "github.com/jaegertracing/jaeger"
COMMAND = f"{MODULE}/cmd/all-in-one"


def cached_jaeger() -> Path:
    """Where Jaeger's all-in-one of the pinned version lives once built."""
    return cache_root() / f"jaeger-{JAEGER_VERSION}" / "bin" / "jaeger-all-in-one"


def find_jaeger(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """The pinned Jaeger all-in-one from the cache, built there once."""
    label = f"jaeger {JAEGER_VERSION}"

    def make(go: str, staging: Path) -> Path:
        work = cached_jaeger().parent.parent / "src"
        work.mkdir(parents=True, exist_ok=True)
        replaces = module_replaces(_module_gomod(go, MODULE, JAEGER_VERSION, work))
        (work / "go.mod").write_text(_wrapper_gomod("towline.local/jaeger-binary", f"{MODULE} {JAEGER_VERSION}",
                                                    replaces))
        (work / "go.sum").write_text("")
        _run_go([go, "get", f"{COMMAND}@{JAEGER_VERSION}"], work, progress, f"{label}: resolving dependencies")
        _run_go([go, "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(staging / "jaeger-all-in-one"),
                 COMMAND], work, progress, f"{label}: compiling")
        return staging / "jaeger-all-in-one"

    return go_build_once(cached_jaeger(), label, make, build=build, progress=progress)


if __name__ == "__main__":
    sys.stdout.write(f"{find_jaeger()}\n")
