"""Find, or build once, the Kubernetes binaries the local control plane runs.

Search order (first complete set wins):

1. ``TOWLINE_K8S_BIN_DIR``: a directory the user names; every binary must be there.
2. ``PATH``: used only when every binary is on it and ``kube-apiserver`` reports
   the pinned version (a stray kubectl of another release is not enough).
3. The cache outside the repository (``$TOWLINE_CACHE_DIR``, else
   ``$XDG_CACHE_HOME/towline``, else ``~/.cache/towline``).
4. Built into that cache from the Go module proxy, once.

The build never touches the repository and never downloads prebuilt binaries:
it compiles the pinned releases with the local Go toolchain.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from towline_dev.versions import (
    COREDNS_VERSION,
    ETCD_VERSION,
    HELM_VERSION,
    KUBE_ROUTER_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    LOCAL_PATH_PROVISIONER_VERSION,
)

KUBERNETES_COMMANDS = (
    "kube-apiserver", "kube-controller-manager", "kubectl", "kube-scheduler", "kubelet", "kube-proxy",
)
NODE_ADDONS = ("coredns", "kube-router")
"""Built into a directory of their own (keyed by their versions) next to the Kubernetes set."""
COMPONENTS = ("etcd", *KUBERNETES_COMMANDS, "helm", *NODE_ADDONS)

Progress = Callable[[str], None]


class BinariesUnavailable(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """No complete set of binaries could be found or built; the message says how to fix it."""


@dataclass(frozen=True)
class BinarySet:
    """Absolute paths of one complete, version-consistent set of binaries."""

    directory_by_component: dict[str, Path]
    origin: str

    def path(self, component: str) -> Path:
        return self.directory_by_component[component] / component


def cache_root() -> Path:
    """The cache directory outside the repository where builds are kept."""
    explicit = os.environ.get("TOWLINE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "towline"


def cached_bin_dir() -> Path:
    """Where the binaries of the pinned versions live once built."""
    key = f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}_helm-{HELM_VERSION}"
    return cache_root() / key / "bin"


def cached_addons_dir() -> Path:
    """Where CoreDNS and kube-router of the pinned versions live once built."""
    return cache_root() / f"coredns-{COREDNS_VERSION}_kube-router-{KUBE_ROUTER_VERSION}" / "bin"


def _cache_dir_for(component: str) -> Path:
    return cached_addons_dir() if component in NODE_ADDONS else cached_bin_dir()


HELM_RECIPE = "kube-version-1.35"
"""How helm is built, stamped beside it (`helm.recipe`): a cached helm built another way is built again.

Helm's own release build sets the Kubernetes version it assumes offline (`helm template`, `helm lint`) from
its client-go; a plain `go install` leaves v1.20, which the chart's `kubeVersion: >=1.30` refuses."""


def _missing_from_cache() -> list[str]:
    missing = [c for c in COMPONENTS if not (_cache_dir_for(c) / c).is_file()]
    stamp = _cache_dir_for("helm") / "helm.recipe"
    if "helm" not in missing and (not stamp.is_file() or stamp.read_text().strip() != HELM_RECIPE):
        missing.append("helm")
    return missing


def _stderr_progress(message: str) -> None:
    print(f"[towline dev] {message}", file=sys.stderr, flush=True)


def find_binaries(*, build: bool = True, progress: Progress = _stderr_progress) -> BinarySet:
    """Return a complete binary set, building the pinned versions if nothing else has them."""
    explicit = os.environ.get("TOWLINE_K8S_BIN_DIR")
    if explicit:
        directory = Path(explicit)
        missing = [c for c in COMPONENTS if not (directory / c).is_file()]
        if missing:
            raise BinariesUnavailable(
                f"TOWLINE_K8S_BIN_DIR={directory} lacks {', '.join(missing)}; "
                "put every one of " + ", ".join(COMPONENTS) + " there, or unset it to use the cache"
            )
        return BinarySet({c: directory for c in COMPONENTS}, origin=f"TOWLINE_K8S_BIN_DIR={directory}")

    on_path = _complete_set_on_path()
    if on_path is not None:
        return on_path

    cached = cached_bin_dir()
    directories = {c: _cache_dir_for(c) for c in COMPONENTS}
    if not _missing_from_cache():
        return BinarySet(directories, origin=f"cache {cached}")
    if not build:
        raise BinariesUnavailable(
            f"the Kubernetes binaries are not built yet ({', '.join(_missing_from_cache())} missing "
            f"from {cached})"
        )
    build_binaries(progress=progress)
    return BinarySet(directories, origin=f"cache {cached} (just built)")


def _complete_set_on_path() -> BinarySet | None:
    found = {c: shutil.which(c) for c in COMPONENTS}
    if not all(found.values()):
        return None
    apiserver = found["kube-apiserver"]
    assert apiserver is not None
    try:
        reported = subprocess.run(
            [apiserver, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    if KUBERNETES_VERSION not in reported:
        return None
    return BinarySet({c: Path(p).parent for c, p in found.items() if p}, origin="PATH")


@contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Serialise builds across processes (two pytest sessions, a test and `make dev`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_binaries(*, progress: Progress = _stderr_progress) -> Path:
    """Compile whatever the cache lacks of the pinned releases. Idempotent; safe to run concurrently.

    Only missing components are built (a cache from before the node existed gains
    kubelet, kube-proxy, CoreDNS and kube-router without relinking the rest).
    """
    target = cached_bin_dir()
    with _exclusive_lock(target.parent / "build.lock"):
        missing = _missing_from_cache()
        if not missing:
            return target
        found_go = shutil.which("go")
        if found_go is None:
            raise BinariesUnavailable(
                "the local cluster needs " + ", ".join(COMPONENTS) + "; "
                f"{', '.join(missing)} were not found and Go is not installed to build them. "
                "Install Go 1.25 or newer, or set TOWLINE_K8S_BIN_DIR to a directory holding them."
            )
        progress(
            f"First start: building {', '.join(missing)} (Kubernetes {KUBERNETES_VERSION}, etcd "
            f"{ETCD_VERSION}, helm {HELM_VERSION}, CoreDNS {COREDNS_VERSION}, kube-router "
            f"{KUBE_ROUTER_VERSION}) from the Go module proxy into {target.parent.parent}. This "
            "happens once per machine and takes roughly 10-40 minutes depending on the machine "
            "(8-12 minutes measured on 2 cores for the control plane alone); later starts reuse the cache."
        )
        go: str = found_go
        started = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix="bin-", dir=target.parent))
        work = target.parent / "src"
        kubernetes = [c for c in KUBERNETES_COMMANDS if c in missing]
        steps: list[tuple[str, Callable[[str], None]]] = []
        if kubernetes:
            steps.append((
                f"Kubernetes {KUBERNETES_VERSION} ({', '.join(kubernetes)})",
                lambda label: _build_kubernetes(go, work / "kubernetes", staging, progress, label, kubernetes),
            ))
        if "etcd" in missing:
            steps.append((
                f"etcd {ETCD_VERSION}", lambda label: _build_etcd(go, work / "etcd", staging, progress, label)
            ))
        if "helm" in missing:
            steps.append((f"helm {HELM_VERSION}", lambda label: _build_helm(go, staging, progress, label)))

        def addon_step(addon: str) -> Callable[[str], None]:
            return lambda label: _build_addon(go, addon, staging, progress, label)

        steps += [(f"{a} {_ADDON_MODULES[a][1]}", addon_step(a)) for a in NODE_ADDONS if a in missing]
        try:
            for number, (what, build) in enumerate(steps, start=1):
                label = f"[{number}/{len(steps)}] {what}"
                step_started = time.monotonic()
                progress(label)
                build(label)
                progress(f"{label}: done in {time.monotonic() - step_started:.0f} s")
            for built in staging.iterdir():
                destination = _cache_dir_for(built.name)
                destination.mkdir(parents=True, exist_ok=True)
                built.replace(destination / built.name)
            if "helm" in missing:
                (_cache_dir_for("helm") / "helm.recipe").write_text(HELM_RECIPE + "\n")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        progress(f"Built {', '.join(missing)} in {time.monotonic() - started:.0f} s")
        return target


def _go_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false", GOTOOLCHAIN="local")
    env.update(overrides)
    return env


def _run_go(
    args: list[str], cwd: Path, progress: Progress, label: str, env: dict[str, str] | None = None
) -> None:
    """Run a go command, turning its package-by-package output into periodic progress lines."""
    cwd.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        args, cwd=cwd, env=env or _go_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    tail: list[str] = []
    last_report = time.monotonic()
    for count, line in enumerate(process.stdout, start=1):
        tail = [*tail, line.rstrip()][-40:]
        if time.monotonic() - last_report > 30:
            progress(f"{label}: {count} packages/modules processed so far…")
            last_report = time.monotonic()
    if process.wait() != 0:
        raise BinariesUnavailable(f"{label} failed:\n" + "\n".join(tail))


def _module_gomod(go: str, module: str, version: str, cwd: Path) -> str:
    """Download a module and return its go.mod text (to read its staging replaces)."""
    cwd.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=cwd, env=_go_env(), capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise BinariesUnavailable(f"cannot download {module}@{version}: {result.stdout}{result.stderr}")
    info = json.loads(result.stdout)
    return Path(info["GoMod"]).read_text()


def staging_replaces(kubernetes_gomod: str) -> list[str]:
    """Names of the staging modules k8s.io/kubernetes replaces with local directories.

    A wrapper module must pin each of them to its published v0.<minor>.<patch>
    tag, because a dependency's own relative replaces are ignored by Go.
    """
    return sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", kubernetes_gomod, re.M)))


def _wrapper_gomod(module: str, requirement: str, replaces: dict[str, str]) -> str:
    lines = [f"module {module}", "", "go 1.25.0", "", "godebug default=go1.25", "",
             f"require {requirement}", ""]
    if replaces:
        lines.append("replace (")
        lines += [f"\t{old} => {new}" for old, new in sorted(replaces.items())]
        lines.append(")")
    return "\n".join(lines) + "\n"


def _kubernetes_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={KUBERNETES_VERSION}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
            f"-X {package}.buildDate={stamp}",
        ]
    return "-s -w " + " ".join(flags)


def _build_kubernetes(  # noqa: PLR0917 - private, called from one place
    go: str, work: Path, out: Path, progress: Progress, label: str, commands: list[str]
) -> None:
    progress(f"{label}: resolving modules")
    gomod = _module_gomod(go, "k8s.io/kubernetes", KUBERNETES_VERSION, work)
    staging_version = "v0." + KUBERNETES_VERSION.lstrip("v").split(".", 1)[1]
    replaces = {name: f"{name} {staging_version}" for name in staging_replaces(gomod)}
    (work / "go.mod").write_text(
        _wrapper_gomod("towline.local/k8s-binaries", f"k8s.io/kubernetes {KUBERNETES_VERSION}", replaces)
    )
    (work / "go.sum").touch()
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in commands]
    # An explicit @version on every package: a bare `go get` would upgrade to the newest release.
    pinned = [f"{package}@{KUBERNETES_VERSION}" for package in packages]
    _run_go([go, "get", *pinned], work, progress, f"{label}: resolving dependencies")
    progress(f"{label}: compiling {', '.join(commands)} (the long part)")
    _run_go(
        [go, "build", "-v", "-trimpath", "-ldflags", _kubernetes_ldflags(), "-o", str(out) + "/", *packages],
        work, progress, f"{label}: compiling",
    )


def _build_etcd(go: str, work: Path, out: Path, progress: Progress, label: str) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(
        _wrapper_gomod("towline.local/etcd-binary", f"go.etcd.io/etcd/server/v3 {ETCD_VERSION}", {})
    )
    (work / "go.sum").touch()
    _run_go(
        [go, "get", f"go.etcd.io/etcd/server/v3@{ETCD_VERSION}"], work, progress, f"{label}: resolving dependencies"
    )
    ldflags = f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=release-{ETCD_VERSION}"
    _run_go(
        [go, "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(out / "etcd"), "go.etcd.io/etcd/server/v3"],
        work, progress, f"{label}: compiling",
    )


def _build_helm(go: str, out: Path, progress: Progress, label: str) -> None:
    # As helm's Makefile: the Kubernetes version of its client-go (v0.35 -> 1.35) for offline rendering and lint.
    kube = [f"-X helm.sh/helm/v3/pkg/{package}.k8sVersion{part}={value}"
            for package in ("chartutil", "lint/rules") for part, value in (("Major", "1"), ("Minor", "35"))]
    ldflags = " ".join([f"-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}", *kube])
    # `go install module@version` builds outside any module, so no -mod flag.
    _run_go(
        [go, "install", "-v", "-trimpath", "-ldflags", ldflags, f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
        out, progress, f"{label}: compiling", env=_go_env(GOBIN=str(out), GOFLAGS="-buildvcs=false"),
    )


_ADDON_MODULES = {
    "coredns": ("github.com/coredns/coredns", COREDNS_VERSION),
    "kube-router": ("github.com/cloudnativelabs/kube-router/v2/cmd/kube-router", KUBE_ROUTER_VERSION),
}


def _build_addon(go: str, name: str, out: Path, progress: Progress, label: str) -> None:
    package, version = _ADDON_MODULES[name]
    _run_go(
        [go, "install", "-v", "-trimpath", "-ldflags", "-s -w", f"{package}@{version}"],
        out, progress, f"{label}: compiling", env=_go_env(GOBIN=str(out), GOFLAGS="-buildvcs=false"),
    )


def cached_kwok() -> Path:
    """Where kwok of the pinned version lives once built."""
    return cache_root() / f"kwok-{KWOK_VERSION}" / "bin" / "kwok"


def find_kwok(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """kwok for the scale benchmarks and the shard tests: from the cache, else built once from the Go module proxy.

    Not one of COMPONENTS (the real node does not need it): `make binaries` builds it for the shard tests.
    """
    return go_install_once(
        f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}", cached_kwok(), build=build, progress=progress
    )


def cached_local_path_provisioner() -> Path:
    """Where local-path-provisioner of the pinned version lives once built."""
    return cache_root() / f"local-path-provisioner-{LOCAL_PATH_PROVISIONER_VERSION}" / "bin" / "local-path-provisioner"


def find_local_path_provisioner(*, build: bool = True, progress: Progress = _stderr_progress) -> Path:
    """The real node's volume provisioner (its image is written by towline_dev.node.nodeimages): from the
    cache, else built once from the Go module proxy. A directory of its own, keyed by its version, so adding
    or moving it never rebuilds CoreDNS and kube-router; `make binaries` builds it with the node's set."""
    module = "github.com/rancher/local-path-provisioner"
    return go_install_once(
        f"{module}@{LOCAL_PATH_PROVISIONER_VERSION}", cached_local_path_provisioner(),
        ldflags=f"-s -w -X main.VERSION={LOCAL_PATH_PROVISIONER_VERSION}", build=build, progress=progress,
    )


def go_install_once(
    package: str, target: Path, *, ldflags: str = "-s -w", tags: str = "", build: bool = True,
    progress: Progress = _stderr_progress,
) -> Path:
    """A single Go command (`module/cmd/name@version`) at `target`, built there once with `go install`.

    For the tools that are no part of a node (kwok, kubeconform): each keyed by its version in a
    directory of its own, so building one never waits for or invalidates the Kubernetes set.
    """
    label = package.rsplit("/", 1)[-1].replace("@", " ")

    def install(go: str, staging: Path) -> Path:
        # `go install module@version` builds outside any module, so no -mod flag.
        _run_go(
            [go, "install", "-v", "-trimpath", "-ldflags", ldflags, *(["-tags", tags] if tags else []), package],
            staging, progress, f"{label}: compiling", env=_go_env(GOBIN=str(staging), GOFLAGS="-buildvcs=false"),
        )
        return staging / target.name

    return go_build_once(target, label, install, build=build, progress=progress)


def go_build_once(
    target: Path, label: str, make: Callable[[str, Path], Path], *, build: bool = True,
    progress: Progress = _stderr_progress,
) -> Path:
    """The command at `target`, made once per machine by `make(go, staging)` (which returns the built file):
    under a lock beside its directory, in a staging directory removed afterwards, moved into place whole."""
    if target.is_file():
        return target
    if not build:
        raise BinariesUnavailable(f"{label} is not built yet ({target} is missing)")
    with _exclusive_lock(target.parent.parent / "build.lock"):
        if target.is_file():
            return target
        go = shutil.which("go")
        if go is None:
            raise BinariesUnavailable(f"{label} is not in {target} and Go is not installed to build it")
        progress(f"{label}: building from the Go module proxy into {target.parent} (once per machine)")
        started = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix="bin-", dir=target.parent.parent))
        try:
            built = make(go, staging)
            target.parent.mkdir(parents=True, exist_ok=True)
            built.replace(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        progress(f"{label}: built in {time.monotonic() - started:.0f} s")
        return target
