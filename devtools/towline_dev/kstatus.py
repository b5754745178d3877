"""What kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status) says about an object: Current, InProgress, Failed.

Flux, kpt, Config Sync and cli-utils' apply waiter decide whether an object is done with kstatus'
`Compute`, not with its `phase`. `kstatus.go` beside this file is a ten-line command over that
function (JSON object on stdin, `{"status", "message"}` on stdout); it is built once from the Go
module proxy with the cli-utils version pinned in versions.py, so the tests ask the real library,
never a re-implementation of its rules.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from towline_dev.binaries import (
    Progress,
    _run_go,
    _stderr_progress,
    _wrapper_gomod,
    cache_root,
    go_build_once,
)
from towline_dev.versions import CLI_UTILS_VERSION

SOURCE = Path(__file__).with_name("kstatus.go")
MODULE = "sigs.k8s.io/cli-utils"


@dataclass(frozen=True)
class Verdict:
    """kstatus' Result: its status word and message."""

    status: str
    message: str


def cached_kstatus() -> Path:
    """Where the command lives once built: keyed by the cli-utils version and the command's source."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return cache_root() / f"kstatus-{CLI_UTILS_VERSION}-{digest}" / "bin" / "kstatus"


def find_kstatus(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """The command from the cache, else built once (`make binaries` does it)."""
    label = f"kstatus (cli-utils {CLI_UTILS_VERSION})"

    def compile_wrapper(go: str, work: Path) -> Path:
        (work / "go.mod").write_text(_wrapper_gomod("towline.local/kstatus", f"{MODULE} {CLI_UTILS_VERSION}", {}))
        (work / "go.sum").touch()
        shutil.copyfile(SOURCE, work / "main.go")
        # tidy adds the modules the program imports at the versions cli-utils requires (no newer ones).
        _run_go([go, "mod", "tidy"], work, progress, f"{label}: resolving dependencies")
        _run_go([go, "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(work / "kstatus"), "."],
                work, progress, f"{label}: compiling")
        return work / "kstatus"

    return go_build_once(cached_kstatus(), label, compile_wrapper, build=build, progress=progress)


def compute(resource: dict[str, Any], *, binary: Path | None = None) -> Verdict:
    """kstatus' verdict on one object as the API server returned it (kind, metadata and status)."""
    command = binary or find_kstatus()
    result = subprocess.run(
        [str(command)], input=json.dumps(resource), capture_output=True, text=True, check=False, timeout=30,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kstatus failed: {result.stderr.strip()}")
    answer = json.loads(result.stdout)
    return Verdict(status=str(answer["status"]), message=str(answer["message"]))
