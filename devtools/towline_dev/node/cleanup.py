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
import shutil
import signal
import subprocess
from collections.abc import Callable
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


RUNC_ROOT = "/run/containerd/runc/k8s.io"
"""Where containerd's runc shim keeps container state for the CRI namespace."""
STATE_MARKER = "towline-node-state"
"""A file in every node state directory: marks containers and shims as this tooling's own."""


def _argv_of(pid: str) -> list[bytes]:
    try:
        return (Path("/proc") / pid / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def remove_stale(progress: Callable[[str], None]) -> None:
    """Remove what a node killed without its `stop()` (SIGKILL, a crash) left behind.

    Only called while holding the machine's node lock, so no other node runs. Only
    containers whose bundle lies in a marked node state directory, and shims started
    for a socket in one, are touched; a containerd of anyone else is left alone.
    """
    listed = subprocess.run(["runc", "--root", RUNC_ROOT, "list", "--format", "json"],
                            capture_output=True, text=True, check=False)
    stale: list[str] = []
    netns: list[str] = []
    state_dirs: set[Path] = set()
    with contextlib.suppress(ValueError, TypeError):
        for container in json.loads(listed.stdout or "null") or []:
            bundle = Path(container.get("bundle", ""))
            state_dir = _node_state_dir(bundle)
            if state_dir is not None:
                stale.append(container["id"])
                netns += _bundle_netns(bundle)
                state_dirs.add(state_dir)
    for pid in (entry.name for entry in Path("/proc").iterdir() if entry.name.isdigit()):
        argv = _argv_of(pid)
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and b"-address" in argv:
            address = argv[argv.index(b"-address") + 1].decode(errors="replace")
            state_dir = _node_state_dir(Path(address))
            if state_dir is not None:
                state_dirs.add(state_dir)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    if stale:
        progress(f"removing {len(stale)} containers a previous node left running")
    for container_id in stale:
        subprocess.run(["runc", "--root", RUNC_ROOT, "kill", container_id, "KILL"], capture_output=True, check=False)
        subprocess.run(["runc", "--root", RUNC_ROOT, "delete", "--force", container_id],
                       capture_output=True, check=False)
    for path in netns:
        remove_netns(path)
    for state_dir in state_dirs:
        progress(f"removing the state of a node that was not stopped: {state_dir}")
        unmount_all(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


def _bundle_netns(bundle: Path) -> list[str]:
    """The named network namespace a container's OCI spec joins (a pod sandbox's), if any."""
    try:
        namespaces = json.loads((bundle / "config.json").read_text())["linux"]["namespaces"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [n["path"] for n in namespaces if n.get("type") == "network" and n.get("path")]


def _node_state_dir(path: Path) -> Path | None:
    for parent in path.parents:
        if (parent / STATE_MARKER).is_file():
            return parent
    return None
