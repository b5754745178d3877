"""Run a command from an unpacked image with runc, shaped like a step pod.

Read-only root, uid 65532, no capabilities, no privilege escalation, a
memory /tmp, a private network namespace with only loopback, and the host
directories the caller binds. runc's own state lives in a private directory so
nothing here touches another runtime's containers.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.support import wait_for

UID = 65532


@dataclass(frozen=True)
class Bind:
    source: Path
    destination: str
    read_only: bool = True


def image_process(config: Mapping[str, Any], args: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """argv and env as a container runtime derives them from the image config (args replace Cmd)."""
    image = config["config"]
    argv = list(image.get("Entrypoint") or []) + list(args if args is not None else image.get("Cmd") or [])
    return argv, list(image.get("Env") or [])


def run_container(
    rootfs: Path,
    work: Path,
    *,
    argv: Sequence[str],
    env: Sequence[str],
    binds: Sequence[Bind] = (),
    cwd: str = "/",
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run argv in a fresh container over `rootfs`; returns runc's exit status and the process output."""
    bundle = work / f"bundle-{secrets.token_hex(4)}"
    bundle.mkdir(parents=True)
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
    spec = json.loads((bundle / "config.json").read_text())
    process = spec["process"]
    process.update(terminal=False, args=list(argv), env=list(env), cwd=cwd, noNewPrivileges=True)
    process["user"] = {"uid": UID, "gid": UID}
    process["capabilities"] = {key: [] for key in ("bounding", "effective", "permitted", "ambient")}
    spec["root"] = {"path": str(rootfs), "readonly": True}
    spec["hostname"] = "step"
    spec["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                           "options": ["nosuid", "nodev", "mode=1777", "size=16m"]})
    for bind in binds:
        options = ["rbind", "ro" if bind.read_only else "rw", "nosuid", "nodev"]
        spec["mounts"].append({"destination": bind.destination, "type": "bind", "source": str(bind.source),
                               "options": options})
    (bundle / "config.json").write_text(json.dumps(spec))
    state = work / "runc-state"
    state.mkdir(exist_ok=True)
    container_id = f"towline-image-test-{secrets.token_hex(4)}"
    try:
        return subprocess.run(
            ["runc", "--root", str(state), "run", "--bundle", str(bundle), container_id],
            capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL,
        )
    finally:
        subprocess.run(["runc", "--root", str(state), "delete", "--force", container_id],
                       capture_output=True, check=False)


class PrivateContainerd:
    """A containerd of the test's own (own root, state and socket; no CRI), to import archives into."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.socket = work / "containerd.sock"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrivateContainerd:
        config = self.work / "config.toml"
        config.write_text(
            "version = 2\n"
            f'root = "{self.work / "root"}"\n'
            f'state = "{self.work / "state"}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{self.socket}"\n'
        )
        log = (self.work / "containerd.log").open("wb")
        self.process = subprocess.Popen(["containerd", "--config", str(config)], stdout=log, stderr=log)
        wait_for("containerd to answer", lambda: self.ctr("version").returncode == 0, 10, interval=0.1,
                 explain=lambda: f"see {self.work / 'containerd.log'}")
        return self

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
                              capture_output=True, text=True, timeout=300, check=False)

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
