"""Build, once, the Go example of a ``code.wasm`` step (examples/code-steps/wasm-go) for tests and demos.

The module is compiled by this machine's Go (``GOOS=wasip1 GOARCH=wasm``, CGO off, ``-trimpath``, no VCS
stamp, no network: the example requires no module) into the cache directory outside the repository, named by
a digest of its sources and of the Go version, so an unchanged example and toolchain reuse the file without
running anything. The build writes a temporary file next to the target and renames it: a reader never sees a
half-written module, and two concurrent builds only do the work twice.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.binaries import cache_root

GO_EXAMPLE = REPO_ROOT / "examples" / "code-steps" / "wasm-go"
"""The example's package directory."""

Progress = Callable[[str], None]


class WasmExampleUnavailable(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """The example could not be built; the message says why and how to fix it."""


def _stderr_progress(message: str) -> None:
    print(f"[towline dev] {message}", file=sys.stderr, flush=True)


def wasm_cache() -> Path:
    """Where built example modules live."""
    return cache_root() / "wasm"


def _go_env(cache: Path) -> dict[str, str]:
    """None of the caller's GO* settings (the key would not see them); the build cache under ours."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("GO", "CGO_"))}
    env.update(
        GOOS="wasip1", GOARCH="wasm", CGO_ENABLED="0", GOFLAGS="-trimpath -buildvcs=false", GOTOOLCHAIN="local",
        GOPROXY="off", GOWORK="off", GOCACHE=str(cache / "go-build"), GOMODCACHE=str(cache / "go-mod"),
    )
    return env


def _go_version(go: str, env: dict[str, str]) -> str:
    try:
        result = subprocess.run([go, "env", "GOVERSION"], env=env, capture_output=True, text=True, check=False,
                                timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise WasmExampleUnavailable(f"`{go} env GOVERSION` failed: {error}") from error
    if result.returncode != 0 or not result.stdout.strip():
        raise WasmExampleUnavailable(f"`{go} env GOVERSION` failed: {result.stderr.strip()}")
    return result.stdout.strip()


def _sources(package: Path) -> list[Path]:
    found = [p for p in package.iterdir() if p.is_file() and p.suffix == ".go" and not p.name.endswith("_test.go")]
    found += [p for p in (package / "go.mod", package / "go.sum") if p.is_file()]
    return sorted(found)


def _program_name(package: Path) -> str:
    """The last element of the module path in go.mod (what `go build` names the program)."""
    for line in (package / "go.mod").read_text().splitlines():
        if line.startswith("module "):
            return line.split()[1].strip('"').rsplit("/", 1)[-1]
    raise WasmExampleUnavailable(f"{package / 'go.mod'} names no module")


def example_key(package: Path, go_version: str) -> str:
    """A digest of the Go version and of each source file's name and bytes."""
    digest = hashlib.sha256(f"wasip1/wasm -trimpath {go_version}".encode())
    for source in _sources(package):
        digest.update(b"\0" + source.name.encode() + b"\0")
        digest.update(hashlib.sha256(source.read_bytes()).digest())
    return digest.hexdigest()[:20]


def build_go_example(progress: Progress | None = None, *, package: Path = GO_EXAMPLE) -> Path:
    """The path of the example's module, built first if the cache lacks it for these sources and this Go."""
    report = progress or _stderr_progress
    go = shutil.which("go")
    if go is None:
        raise WasmExampleUnavailable(
            f"building the code.wasm example in {package} needs Go 1.21 or newer on PATH (the local node's "
            "binaries are built with it too)"
        )
    cache = wasm_cache()
    env = _go_env(cache)
    name = _program_name(package)
    target = cache / f"{name}-{example_key(package, _go_version(go, env))}.wasm"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    report(f"building {name} for wasip1/wasm into {target}")
    started = time.monotonic()
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=cache)
    os.close(handle)
    try:
        try:
            result = subprocess.run([go, "-C", str(package), "build", "-o", temporary, "."], env=env,
                                    capture_output=True, text=True, check=False, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise WasmExampleUnavailable(f"go build of {package} failed: {error}") from error
        if result.returncode != 0:
            raise WasmExampleUnavailable(f"go build of {package} failed:\n{result.stdout}{result.stderr}".rstrip())
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    finally:
        Path(temporary).unlink(missing_ok=True)
    report(f"built {target.name} ({target.stat().st_size:,} bytes) in {time.monotonic() - started:.1f} s")
    return target
