"""Argo Workflows' `workflow-controller` and CRDs of the pinned release, for the side-by-side benchmark.

The controller is built once from the Go module proxy into the cache (like kwok); its CRDs are read
from the same module in the Go module cache, so both come from one pinned version.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from towline_dev.binaries import BinariesUnavailable, Progress, _go_env, _stderr_progress, cache_root, go_install_once
from towline_dev.versions import ARGO_WORKFLOWS_VERSION

MODULE = "github.com/argoproj/argo-workflows/v4"


def cached_workflow_controller() -> Path:
    """Where the workflow-controller of the pinned version lives once built."""
    return cache_root() / f"argo-workflows-{ARGO_WORKFLOWS_VERSION}" / "bin" / "workflow-controller"


def find_workflow_controller(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """The controller from the cache, else built once (about 5 minutes on 2 cores with a cold Go cache)."""
    return go_install_once(
        f"{MODULE}/cmd/workflow-controller@{ARGO_WORKFLOWS_VERSION}",
        cached_workflow_controller(), build=build, progress=progress,
    )


def argo_crds() -> list[Path]:
    """The release's minimal CRDs (no OpenAPI schema: the controller validates), from the Go module cache.

    Building the controller put the module there; `go mod download` fetches it when it was built elsewhere.
    """
    go = shutil.which("go")
    if go is None:
        raise BinariesUnavailable("Argo Workflows' CRDs are read from the Go module cache, and Go is not installed")
    module = f"{MODULE}@{ARGO_WORKFLOWS_VERSION}"
    env = _go_env(GOFLAGS="-buildvcs=false")
    modcache = subprocess.run([go, "env", "GOMODCACHE"], check=True, capture_output=True, text=True, env=env)
    directory = Path(modcache.stdout.strip()) / module / "manifests" / "base" / "crds" / "minimal"
    if not directory.is_dir():
        subprocess.run([go, "mod", "download", module], check=True, capture_output=True, env=env)
    crds = sorted(directory.glob("argoproj.io_*.yaml"))
    if not crds:
        raise BinariesUnavailable(f"no Argo Workflows CRDs in {directory}")
    return crds
