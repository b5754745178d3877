"""CloudEvents senders and a receiver written in Go, for the interop tests: found in the cache, else built once
from the Go module proxy.

- `cesdk` (the Go module in `cesdk/` beside this file, its go.mod and go.sum pinning the CloudEvents SDK for Go):
  `send` posts one event with the SDK's own HTTP client, structured or binary; `receive` parses each request
  with the SDK's HTTP message reader and writes what it parsed as JSON lines. Its cache directory is named by a
  digest of its three files, so an edit builds a new one.
- Knative Eventing's `heartbeats` sample (`knative.dev/eventing/cmd/heartbeats`, the pinned release): a sender
  no one here wrote, as a Knative ContainerSource runs it (`K_SINK`, `ONE_SHOT`), sending with the Go SDK.

Neither is part of a release; `make binaries` builds both.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from towline_dev.binaries import (
    BinariesUnavailable,
    Progress,
    _go_env,
    _run_go,
    _stderr_progress,
    _wrapper_gomod,
    cache_root,
    go_build_once,
)
from towline_dev.versions import CLOUDEVENTS_SDK_GO_VERSION, KNATIVE_EVENTING_VERSION

CESDK_SOURCE = Path(__file__).with_name("cesdk")
CESDK_FILES = ("go.mod", "go.sum", "main.go")
SDK_MODULE = "github.com/cloudevents/sdk-go/v2"
KNATIVE_MODULE = "knative.dev/eventing"
HEARTBEATS = f"{KNATIVE_MODULE}/cmd/heartbeats"


def pinned_sdk_version(gomod: str) -> str | None:
    """The CloudEvents SDK version a go.mod requires, or None."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(SDK_MODULE)}\s+(v\S+)", gomod, re.M)
    return found.group(1) if found else None


def cached_cesdk() -> Path:
    """Where the command lives once built: keyed by a digest of its go.mod, go.sum and source."""
    digest = hashlib.sha256()
    for name in CESDK_FILES:
        digest.update(name.encode() + b"\0" + (CESDK_SOURCE / name).read_bytes() + b"\0")
    return cache_root() / f"cesdk-{digest.hexdigest()[:12]}" / "bin" / "cesdk"


def find_cesdk(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """The `cesdk` command from the cache, else built once with exactly the modules its go.sum names."""
    label = f"cesdk (CloudEvents SDK for Go {CLOUDEVENTS_SDK_GO_VERSION})"
    required = pinned_sdk_version((CESDK_SOURCE / "go.mod").read_text())
    if required != CLOUDEVENTS_SDK_GO_VERSION:
        raise BinariesUnavailable(
            f"{CESDK_SOURCE}/go.mod requires {SDK_MODULE} {required}, versions.py pins {CLOUDEVENTS_SDK_GO_VERSION}: "
            "change both (then `go mod tidy` in that directory)")

    def make(go: str, staging: Path) -> Path:
        work = staging / "src"
        work.mkdir()
        for name in CESDK_FILES:
            shutil.copyfile(CESDK_SOURCE / name, work / name)
        # readonly: go.sum as committed, or the build fails (never a module the repository did not pin).
        _run_go([go, "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(staging / "cesdk"), "."],
                work, progress, f"{label}: compiling", env=_go_env(GOFLAGS="-mod=readonly -buildvcs=false"))
        return staging / "cesdk"

    return go_build_once(cached_cesdk(), label, make, build=build, progress=progress)


def cached_heartbeats() -> Path:
    """Where Knative's heartbeats sender of the pinned release lives once built."""
    return cache_root() / f"knative-heartbeats-{KNATIVE_EVENTING_VERSION}" / "bin" / "heartbeats"


def find_heartbeats(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """Knative Eventing's heartbeats sample of the pinned release, from the cache, else built once."""
    label = f"knative heartbeats (eventing {KNATIVE_EVENTING_VERSION})"

    def make(go: str, staging: Path) -> Path:
        work = staging / "src"
        work.mkdir()
        # knative.dev/eventing's go.mod has no replaces, so the wrapper needs none.
        (work / "go.mod").write_text(
            _wrapper_gomod("towline.local/heartbeats", f"{KNATIVE_MODULE} {KNATIVE_EVENTING_VERSION}", {}))
        (work / "go.sum").write_text("")
        _run_go([go, "get", f"{HEARTBEATS}@{KNATIVE_EVENTING_VERSION}"], work, progress,
                f"{label}: resolving dependencies")
        _run_go([go, "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(staging / "heartbeats"), HEARTBEATS],
                work, progress, f"{label}: compiling")
        return staging / "heartbeats"

    return go_build_once(cached_heartbeats(), label, make, build=build, progress=progress)
