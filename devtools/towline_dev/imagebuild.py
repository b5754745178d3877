"""The commands that build Towline's images without a daemon: mmdebstrap and buildah.

The base is a minimal Debian rootfs with Python (mmdebstrap), imported into a
private buildah store; each image is then built from its Containerfile with
`buildah bud --isolation chroot --build-arg BASE=<that base>`, so the same
Containerfile a user builds with docker is what builds the image here. The
store, the base rootfs and pip's download cache live under the cache
directory, never in the repository or in the machine's default store.

Command lines are built by pure functions (tested without running them);
`run_logged` runs one and turns its output into progress lines. The pieces every
image build shares live here too: the cache directory, the content key, staging
a build context, the base image in the store, dropping superseded builds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from towline_dev.aptsources import host_debian_mirrors
from towline_dev.binaries import cache_root
from towline_dev.ocilayout import write_archive
from towline_dev.versions import IMAGE_BASE_PACKAGES, IMAGE_DEBIAN_SUITE, IMAGE_TOOL_PACKAGES

Progress = Callable[[str], None]

BASE_REPOSITORY = "localhost/towline-base"
PIP_CA_SECRET = "pip-ca"  # noqa: S105 - the build secret's id, not a value
BASE_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Documentation, manuals and translations are dropped from the base; licences stay.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)


class ImageBuildFailed(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """A build command failed; the message carries the end of its output."""


class SourcesChanged(ImageBuildFailed):
    """The tree changed between hashing it and staging it: the staged copy is not what the key names."""


@dataclass(frozen=True)
class BuildahStore:
    """A buildah image store of our own under the cache directory."""

    directory: Path

    @property
    def tmp(self) -> Path:
        # buildah keeps RUN --mount=type=cache directories (pip's cache) under TMPDIR.
        return self.directory / "tmp"

    def global_args(self) -> list[str]:
        return [
            "--root", str(self.directory / "storage"),
            "--runroot", str(self.directory / "run"),
            "--storage-driver", "overlay",
        ]

    def env(self) -> dict[str, str]:
        return {**os.environ, "TMPDIR": str(self.tmp), "BUILDAH_ISOLATION": "chroot"}


def base_key() -> str:
    """Changes whenever what goes into the base rootfs changes."""
    inputs = {
        "suite": IMAGE_DEBIAN_SUITE,
        "packages": list(IMAGE_BASE_PACKAGES),
        "mmdebstrap": IMAGE_TOOL_PACKAGES["mmdebstrap"].version,
        "dpkg": list(DPKG_EXCLUDES),
        "mirrors": debian_sources(),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def base_reference(key: str) -> str:
    return f"{BASE_REPOSITORY}:{key}"


def debian_sources(etc: Path = Path("/etc")) -> list[str]:
    """The suite plus its updates and security fixes: the base should not lag behind them.

    From the mirrors the host's apt uses (a machine that reaches only its local mirror
    builds from that), else Debian's public ones.
    """
    suite = IMAGE_DEBIAN_SUITE
    mirrors = host_debian_mirrors(suite, etc)
    return [
        f"deb {mirrors.archive} {suite} main",
        f"deb {mirrors.archive} {suite}-updates main",
        f"deb {mirrors.security} {suite}-security main",
    ]


def mmdebstrap_command(output: Path) -> list[str]:
    """A minimal rootfs tarball: Debian's essential set plus Python, venv and CA certificates."""
    return [
        "mmdebstrap", "--variant=essential", "--format=tar",
        "--include=" + ",".join(IMAGE_BASE_PACKAGES),
        "--aptopt=Acquire::Languages \"none\"",
        *(f"--dpkgopt={option}" for option in DPKG_EXCLUDES),
        IMAGE_DEBIAN_SUITE, str(output), *debian_sources(),
    ]


def import_base_commands(store: BuildahStore, rootfs_tar: Path, reference: str, container: str) -> list[list[str]]:
    """Turn the rootfs tarball into a one-layer image named `reference` in the store."""
    buildah = ["buildah", *store.global_args()]
    return [
        [*buildah, "from", "--name", container, "scratch"],
        [*buildah, "add", container, str(rootfs_tar), "/"],
        [*buildah, "config", "--env", BASE_PATH_ENV, "--cmd", "python3", container],
        [*buildah, "commit", "--rm", "--quiet", container, reference],
    ]


def bud_command(
    store: BuildahStore, *, containerfile: Path, context: Path, base: str | None, reference: str,
    ca_bundle: Path | None,
) -> list[str]:
    """`buildah bud` of one Containerfile against the local base (None: it needs none), never pulling."""
    command = [
        "buildah", *store.global_args(), "bud",
        "--isolation", "chroot",
        "--pull=never",
        "--format", "oci",
    ]
    if base is not None:
        command += ["--build-arg", f"BASE={base}"]
    command += ["--file", str(containerfile), "--tag", reference]
    if ca_bundle is not None:
        # A build secret: pip trusts the machine's CAs (a TLS-inspecting proxy) without a layer holding them.
        command += ["--secret", f"id={PIP_CA_SECRET},src={ca_bundle}"]
    return [*command, str(context)]


def push_command(store: BuildahStore, reference: str, layout: Path) -> list[str]:
    """Copy the built image into an OCI layout directory (gzip layers)."""
    return ["buildah", *store.global_args(), "push", "--quiet", reference, f"oci:{layout}:{reference}"]


def image_exists_command(store: BuildahStore, reference: str) -> list[str]:
    return ["buildah", *store.global_args(), "inspect", "--type", "image", "--format", "{{.FromImageID}}", reference]


def prune_command(store: BuildahStore) -> list[str]:
    """Drop images no tag points at any more (earlier builds of the same references)."""
    return ["buildah", *store.global_args(), "rmi", "--prune"]


def host_ca_bundle(environ: Mapping[str, str]) -> Path | None:
    """The CA bundle this machine's own pip and Python trust, if there is one."""
    candidates = [environ.get(name, "") for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")]
    candidates.append(ssl.get_default_verify_paths().cafile or "")
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


_STEP_LINE = re.compile(r"^\[\d+/\d+\] STEP \d+/\d+:|^STEP \d+/\d+:")


def run_logged(
    args: list[str],
    progress: Progress,
    label: str,
    *,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    attempts: int = 1,
    retry_delay: float = 30.0,
) -> str:
    """Run a build command; report its STEP lines and a heartbeat; raise with its tail on failure.

    Steps that download (apt, pip) get `attempts` > 1: a mirror or proxy that is
    briefly unreachable should cost a minute, not the whole first build.
    """
    for attempt in range(1, attempts + 1):
        try:
            return _run_once(args, progress, label, env=env, log=log)
        except ImageBuildFailed as failure:
            if attempt == attempts:
                raise
            first_line = str(failure).splitlines()[0]
            progress(f"{label}: {first_line}; retrying in {retry_delay:.0f} s (attempt {attempt + 1}/{attempts})")
            time.sleep(retry_delay)
    raise AssertionError("unreachable")


def _run_once(args: list[str], progress: Progress, label: str, *, env: dict[str, str] | None, log: Path | None) -> str:
    process = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    assert process.stdout is not None
    output: list[str] = []
    last_report = time.monotonic()
    with open(log, "a") if log else open(os.devnull, "w") as sink:
        for line in process.stdout:
            sink.write(line)
            output.append(line.rstrip())
            if _STEP_LINE.match(line):
                progress(f"{label}: {_shorten(line.strip())}")
                last_report = time.monotonic()
            elif time.monotonic() - last_report > 30:
                progress(f"{label}: still working ({_shorten(line.strip())})")
                last_report = time.monotonic()
    if process.wait() != 0:
        tail = "\n".join(output[-30:])
        raise ImageBuildFailed(f"{label} failed (exit {process.returncode}): {' '.join(args[:3])} …\n{tail}")
    return "\n".join(output)


def _shorten(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# What every build shares: where it lives, what decides a rebuild, the base, the archives.

def images_cache() -> Path:
    """Every image build's state: the base rootfs, the buildah store, one directory per content key."""
    return cache_root() / "images"


def content_key(root: Path, files: Iterable[str], pins: Mapping[str, object]) -> str:
    """A digest of the pins and of each file's path and bytes."""
    digest = hashlib.sha256(json.dumps(pins, sort_keys=True).encode())
    for relative in files:
        digest.update(b"\0" + relative.encode() + b"\0")
        digest.update(hashlib.sha256((root / relative).read_bytes()).digest())
    return digest.hexdigest()[:20]


def stage_files(root: Path, files: Iterable[str], context: Path) -> None:
    """Copy exactly `files` (relative to `root`) into the build context `context`."""
    for relative in files:
        destination = context / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / relative, destination)


def ensure_base(store: BuildahStore, progress: Progress, log: Path) -> str:
    """The base image in the store, from the cached rootfs tarball, made with mmdebstrap if needed."""
    key = base_key()
    reference = base_reference(key)
    present = subprocess.run(image_exists_command(store, reference), env=store.env(),
                             capture_output=True, check=False)
    if present.returncode == 0:
        return reference
    rootfs = images_cache() / f"base-{key}.tar"
    if not rootfs.is_file():
        progress(f"Base image: a minimal Debian {IMAGE_DEBIAN_SUITE} with {', '.join(IMAGE_BASE_PACKAGES)} "
                 "(mmdebstrap, about 2 minutes)")
        partial = rootfs.with_name(f"base-{key}.partial.tar")
        run_logged(mmdebstrap_command(partial), progress, "base rootfs", log=log, attempts=3)
        partial.replace(rootfs)
    container = f"towline-base-import-{key}"
    subprocess.run(["buildah", *store.global_args(), "rm", container], env=store.env(),
                   capture_output=True, check=False)
    for command in import_base_commands(store, rootfs, reference, container):
        run_logged(command, progress, "base image", env=store.env(), log=log)
    return reference


def build_archive(
    store: BuildahStore, *, containerfile: Path, context: Path, base: str | None, reference: str,
    ca_bundle: Path | None, archive: Path, progress: Progress, label: str, log: Path,
) -> None:
    """Build one Containerfile and write the image to `archive` (an OCI layout tar naming `reference`)."""
    run_logged(
        bud_command(store, containerfile=containerfile, context=context, base=base, reference=reference,
                    ca_bundle=ca_bundle),
        progress, label, env=store.env(), log=log, attempts=3,
    )
    layout = archive.with_name(archive.name + ".layout")
    run_logged(push_command(store, reference, layout), progress, label, env=store.env(), log=log)
    write_archive(layout, archive, reference)
    shutil.rmtree(layout)


@contextlib.contextmanager
def published_build(target: Path, *, prefix: str) -> Iterator[Path]:
    """A fresh directory beside `target` to build into, which replaces `target` only if the block succeeds.

    Readers look for a complete entry (its `build.json`, or whatever marks it done) under the final name,
    so a build that fails or is killed half-way leaves the old entry or none, never a partial one.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    staging.chmod(0o755)  # readable by whatever loads the archives (a node's containerd)
    try:
        yield staging
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def write_build_manifest(directory: Path, manifest: Mapping[str, object]) -> None:
    """`build.json`: what a cached build was made from; its presence marks the entry complete."""
    (directory / "build.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def drop_other_builds(directory: Path, keep: Path, count: int) -> None:
    """Keep the newest `count` builds in `directory` (`keep` among them); drop the rest and their logs."""
    builds = [entry for entry in directory.iterdir() if (entry / "build.json").is_file() and entry != keep]
    builds.sort(key=lambda entry: entry.stat().st_mtime, reverse=True)
    for entry in builds[count - 1:]:
        shutil.rmtree(entry, ignore_errors=True)
    for log in directory.glob("build-*.log"):
        if not (directory / log.stem.removeprefix("build-")).is_dir():
            log.unlink(missing_ok=True)
