"""Remove what the runtime leaves outside the node's state directory, and its mounts.

Run after the kubelet has had its chance to tear pods down: anything still in
containerd then is killed and deleted through containerd itself (`ctr`), each
sandbox's network namespace is unmounted and removed, and any mount under the
state directory is lazily unmounted. Only objects of this node's containerd
(its own socket) and paths under its own state directory are touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

from towline_dev.node.layout import NodePaths


def ctr(paths: NodePaths, *args: str, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    argv = ["ctr", "--address", str(paths.containerd_socket), "--namespace", "k8s.io", *args]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def running_tasks(paths: NodePaths) -> list[str]:
    """IDs of containers with a task in this node's containerd (empty if it is not running)."""
    result = ctr(paths, "tasks", "ls", "-q")
    return result.stdout.split() if result.returncode == 0 else []


def remove_containers(paths: NodePaths) -> list[str]:
    """Kill and delete every task and container; remove the sandboxes' netns. Returns netns paths."""
    netns: list[str] = []
    for task in running_tasks(paths):
        ctr(paths, "tasks", "kill", "--signal", "SIGKILL", task)
        ctr(paths, "tasks", "delete", "--force", task)
    listed = ctr(paths, "containers", "ls", "-q")
    for container in listed.stdout.split() if listed.returncode == 0 else []:
        info = ctr(paths, "containers", "info", container)
        with contextlib.suppress(ValueError, KeyError, TypeError):
            namespaces = json.loads(info.stdout)["Spec"]["linux"]["namespaces"]
            netns += [n["path"] for n in namespaces if n.get("type") == "network" and n.get("path")]
        ctr(paths, "containers", "delete", container)
    for path in netns:
        remove_netns(path)
    return netns


def remove_netns(path: str) -> None:
    if not path.startswith(("/var/run/netns/", "/run/netns/")):
        return
    subprocess.run(["umount", "-l", path], capture_output=True, check=False)
    with contextlib.suppress(OSError):
        os.unlink(path)


def mounts_under(root: Path) -> list[str]:
    """Mount points below `root`, deepest first (from this process's mountinfo)."""
    prefix = str(root.resolve()) + "/"
    points = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_all(root: Path) -> None:
    for point in mounts_under(root):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def kill_shims(paths: NodePaths) -> list[int]:
    """SIGKILL containerd shims started for this node's socket (they outlive containerd)."""
    socket = str(paths.containerd_socket)
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if socket.encode() in argv and argv[0].endswith(b"containerd-shim-runc-v2"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed
