"""The images the node needs of its own, written as OCI archives into the cache, once.

- the pod sandbox ("pause"): a static C program from the system compiler;
- CoreDNS: the static binary built from the Go module proxy (`towline_dev.binaries`);
- local-path-provisioner (the default StorageClass), built the same way;
- a test image: Debian's static busybox, for probing from inside containers, and the shell of the
  provisioner's helper pods.

Each archive's path carries a digest of its inputs, so a changed input makes a new archive.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from towline_dev.binaries import BinarySet, cache_root, find_local_path_provisioner
from towline_dev.node.layout import COREDNS_IMAGE, LOCAL_PATH_IMAGE, SANDBOX_IMAGE
from towline_dev.node.ociarchive import ImageFile, ImageSpec, write_oci_archive
from towline_dev.node.packages import NodeUnavailable

TEST_IMAGE = "localhost/towline-busybox:dev"
BUSYBOX = Path("/bin/busybox")

PAUSE_SOURCE = r"""
#include <signal.h>
#include <stddef.h>
#include <unistd.h>
#include <sys/wait.h>

/* The pod sandbox: hold the namespaces, reap zombies, exit on TERM or INT. */
static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    struct sigaction term = {0}, child = {0};
    term.sa_handler = quit;
    child.sa_handler = reap;
    child.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGINT, &term, NULL);
    sigaction(SIGTERM, &term, NULL);
    sigaction(SIGCHLD, &child, NULL);
    for (;;) pause();
}
"""

Progress = Callable[[str], None]


def _digest(*parts: bytes) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(hashlib.sha256(part).digest())
    return hasher.hexdigest()[:16]


def _images_dir() -> Path:
    return cache_root() / "node-images"


def _cached(name: str, key: str, build: Callable[[Path], None]) -> Path:
    destination = _images_dir() / f"{name}-{key}.tar"
    if not destination.is_file():
        build(destination)
    return destination


def _compile_pause(workdir: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise NodeUnavailable("building the pod sandbox image needs a C compiler (apt-get install gcc libc6-dev)")
    source = workdir / "pause.c"
    source.write_text(PAUSE_SOURCE)
    binary = workdir / "pause"
    result = subprocess.run(
        [compiler, "-static", "-Os", "-s", "-o", str(binary), str(source)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise NodeUnavailable(f"compiling the pause program failed: {result.stderr.strip()}")
    return binary


def pause_image() -> Path:
    def build(destination: Path) -> None:
        with tempfile.TemporaryDirectory() as work:
            binary = _compile_pause(Path(work))
            spec = ImageSpec(SANDBOX_IMAGE, [ImageFile(binary, "/pause")], entrypoint=["/pause"])
            write_oci_archive(spec, destination)

    return _cached("pause", _digest(PAUSE_SOURCE.encode()), build)


def coredns_image(binaries: BinarySet) -> Path:
    binary = binaries.path("coredns")

    def build(destination: Path) -> None:
        spec = ImageSpec(
            COREDNS_IMAGE, [ImageFile(binary, "/coredns")],
            entrypoint=["/coredns"], cmd=["-conf", "/etc/coredns/Corefile"],
        )
        write_oci_archive(spec, destination)

    return _cached("coredns", _digest(binary.read_bytes()), build)


def local_path_provisioner_image(binary: Path) -> Path:
    binary_digest = _digest(binary.read_bytes())

    def build(destination: Path) -> None:
        spec = ImageSpec(LOCAL_PATH_IMAGE, [ImageFile(binary, "/local-path-provisioner")],
                         entrypoint=["/local-path-provisioner"])
        write_oci_archive(spec, destination)

    return _cached("local-path-provisioner", binary_digest, build)


TEST_IMAGE_LINKS = {"/bin/sh": "busybox"}
"""The one applet link: local-path-provisioner runs its helper pods' scripts as `/bin/sh /script/setup`
(the command is the provisioner's, not the pod template's). Debian's static busybox prefers its own applets
inside `sh`, so the scripts' `mkdir` and `rm` need no links of their own."""


def test_image() -> Path:
    """Static busybox as /bin/busybox (applets are called as `busybox <applet>`), and /bin/sh."""
    if not BUSYBOX.is_file():
        raise NodeUnavailable(f"{BUSYBOX} is missing: apt-get install busybox-static")

    def build(destination: Path) -> None:
        spec = ImageSpec(
            TEST_IMAGE, [ImageFile(BUSYBOX, "/bin/busybox")],
            entrypoint=["/bin/busybox"], cmd=["sleep", "3600"], symlinks=TEST_IMAGE_LINKS,
        )
        write_oci_archive(spec, destination)

    links = "".join(f"{path}->{target};" for path, target in sorted(TEST_IMAGE_LINKS.items()))
    return _cached("busybox", _digest(BUSYBOX.read_bytes(), links.encode()), build)


def node_images(binaries: BinarySet) -> dict[str, Path]:
    """Every image the node and its tests need: reference -> OCI archive."""
    return {
        SANDBOX_IMAGE: pause_image(), COREDNS_IMAGE: coredns_image(binaries),
        LOCAL_PATH_IMAGE: local_path_provisioner_image(find_local_path_provisioner()), TEST_IMAGE: test_image(),
    }
