"""promtool, the pinned Prometheus release's rule checker, built from the Go module proxy.

The chart ships its alerting rules as a plain file (charts/towline/files/alerts.yaml) that the
PrometheusRule template includes; the tests hand that same file to `promtool check rules` and to
`promtool test rules` with series that make each alert fire and not fire.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from towline_dev.binaries import Progress, _stderr_progress, cache_root, go_install_once
from towline_dev.versions import PROMETHEUS_VERSION


def prometheus_release() -> str:
    """The Prometheus release the module version stands for: v0.316.0 is 3.16.0."""
    minor_patch = PROMETHEUS_VERSION.removeprefix("v0.").split(".")
    return f"{int(minor_patch[0]) // 100}.{int(minor_patch[0]) % 100}.{minor_patch[1]}"


def cached_promtool() -> Path:
    """Where promtool of the pinned version lives once built."""
    return cache_root() / f"promtool-{PROMETHEUS_VERSION}" / "bin" / "promtool"


def find_promtool(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """promtool from the cache, else built once from the Go module proxy (`make binaries` does it)."""
    return go_install_once(
        f"github.com/prometheus/prometheus/cmd/promtool@{PROMETHEUS_VERSION}",
        cached_promtool(),
        ldflags=f"-s -w -X github.com/prometheus/common/version.Version={prometheus_release()}",
        # Prometheus' own build tag: no service-discovery plugins (AWS, Azure, GCE, … SDKs), which rule
        # checks and rule tests never use; it cuts the cold build to a fraction.
        tags="remove_all_sd",
        build=build,
        progress=progress,
    )


def promtool(binary: Path, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run promtool; the caller reads returncode, stdout and stderr (its verdicts go to either)."""
    command: Sequence[str] = [str(binary), *(str(arg) for arg in args)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
