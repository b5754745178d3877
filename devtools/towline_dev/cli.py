"""`towline-dev cluster up|down|env`: the local control plane with its real node, in the foreground.

`up` needs root (containers, network namespaces, iptables). It finds (or builds
once, printing progress) the pinned binaries and the two images, starts a control
plane with a real node (`towline_dev.node`: kubelet, containerd, CNI, kube-proxy,
CoreDNS, kube-router), loads the images into the node, prints how to point kubectl
at it and the `helm install` that installs the chart there, records itself in a
state file, and on Ctrl-C or SIGTERM stops everything, leaving nothing behind.
`env` prints the export lines for the running cluster; `down` stops it through the
pid in the state file. `start_dev_cluster` is shared with `towline-dev` (`make dev`).

Imports no Kubernetes client, so the `towline` CLI may call `cluster_main` without
breaking the import contracts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from towline_dev.binaries import BinariesUnavailable, cache_root
from towline_dev.controlplane import ControlPlaneError
from towline_dev.imagebuild import ImageBuildFailed
from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE, ensure_images
from towline_dev.node.packages import NodeUnavailable
from towline_dev.node.realnode import NodeCluster
from towline_dev.processes import alive
from towline_dev.release import (
    api_server_egress,
    example_step_type_values,
    install_args,
    local_image_values,
    printable,
)
from towline_dev.versions import KUBERNETES_VERSION

NEEDS_ROOT = ("the local cluster runs a real node (kubelet, containerd and runc, CNI, iptables), which needs root: "
              "run it as root, e.g. `sudo -E make dev`; nothing was started")


def progress(message: str) -> None:
    print(f"[towline dev] {message}", file=sys.stderr, flush=True)


def default_home() -> Path:
    """Where the one dev cluster of this user keeps its state (outside any repository)."""
    return cache_root() / "dev-cluster"


def state_file(home: Path) -> Path:
    return home / "cluster.json"


_SOCKET_PATH_ROOM = 60
"""How much longer than the state directory containerd's socket paths get (`node/containerd/containerd.sock.ttrpc`,
plus margin); a Unix socket path may not exceed 107 bytes."""


def state_directory(home: Path) -> Path:
    """`home`/state, or a fresh short directory under the system's temporary directory when `home` is so deep
    that the node's Unix socket paths inside it would be too long to bind."""
    preferred = home / "state"
    if len(str(preferred.absolute())) + _SOCKET_PATH_ROOM <= 107:
        return preferred
    return Path(tempfile.mkdtemp(prefix="towline-dev-"))


def read_state(home: Path) -> dict[str, Any] | None:
    """The running cluster's record, or None when none is recorded or its process is gone."""
    try:
        state: dict[str, Any] = json.loads(state_file(home).read_text())
    except (OSError, ValueError):
        return None
    return state if alive(int(state.get("pid", 0))) else None


def path_dirs(cluster: NodeCluster) -> list[str]:
    """Directories to put first on PATH: the pinned kubectl and helm, and the `towline` commands."""
    assert cluster.plane is not None
    dirs = [str(cluster.plane.binaries.path("kubectl").parent)]
    plugin = shutil.which("kubectl-towline")
    if plugin is not None and str(Path(plugin).parent) not in dirs:
        dirs.append(str(Path(plugin).parent))
    return dirs


def export_lines(state: dict[str, Any]) -> str:
    return f"export KUBECONFIG={state['kubeconfig']}\nexport PATH={state['binDir']}:$PATH\n"


def stop_on_signals() -> None:
    """Ctrl-C raises KeyboardInterrupt even where SIGINT came in ignored (a shell's background job),
    and SIGTERM (`towline-dev cluster down`) unwinds the same way: `finally` blocks stop everything."""
    def handle(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handle)


def start_dev_cluster(home: Path) -> tuple[NodeCluster, dict[str, Any]] | None:
    """Control plane + real node with both images loaded, recorded in the state file; None (said why)
    on failure, with nothing left running. The caller stops it (`NodeCluster.stop`) and removes the
    state file. Shared by `towline-dev cluster up` and `towline-dev`, which must never run two clusters
    over one state directory."""
    if os.geteuid() != 0:
        print(f"error: {NEEDS_ROOT}", file=sys.stderr)
        return None
    running = read_state(home)
    if running is not None:
        print(f"A dev cluster is already running (pid {running['pid']}); stop it with "
              "`towline-dev cluster down` or use it:\n" + export_lines(running), file=sys.stderr)
        return None
    home.mkdir(parents=True, exist_ok=True)
    cluster = NodeCluster(state_directory(home), progress=progress)
    try:
        archives = ensure_images(progress)
        cluster.start(images=list(archives.values()))
    except (BinariesUnavailable, ImageBuildFailed, NodeUnavailable, ControlPlaneError, TimeoutError) as error:
        cluster.stop()
        print(f"error: the local cluster did not start:\n{error}", file=sys.stderr)
        return None
    except BaseException:
        cluster.stop()
        raise
    assert cluster.plane is not None
    state = {
        "pid": os.getpid(), "kubeconfig": str(cluster.plane.kubeconfig), "binDir": ":".join(path_dirs(cluster)),
        "server": cluster.plane.server, "stateDir": str(cluster.state_dir),
        "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    state_file(home).write_text(json.dumps(state, indent=2) + "\n")
    return cluster, state


def stop_dev_cluster(cluster: NodeCluster, home: Path) -> None:
    """Stop everything (a second Ctrl-C cannot cut this short) and forget the state file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    progress("stopping: the node's pods, the node, the control plane (a few seconds)")
    cluster.stop()
    state_file(home).unlink(missing_ok=True)
    progress("stopped; nothing is left running")


def _up(home: Path) -> int:
    stop_on_signals()
    cluster: NodeCluster | None = None
    try:
        started = start_dev_cluster(home)
        if started is None:
            return 1
        cluster, state = started
        print(_banner(cluster, state), flush=True)
        while cluster.plane is not None and cluster.plane.is_running() and cluster.node and cluster.node.is_running():
            time.sleep(0.5)
        print(f"error: a component exited; logs are in {cluster.state_dir}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if cluster is not None:
            stop_dev_cluster(cluster, home)


def _banner(cluster: NodeCluster, state: dict[str, Any]) -> str:
    assert cluster.plane is not None and cluster.node is not None
    values = {**local_image_values(), **example_step_type_values(), **api_server_egress(cluster.plane)}
    helm = printable(["helm", *install_args(values)])
    return (
        f"Towline dev cluster is up: Kubernetes {KUBERNETES_VERSION} at {cluster.plane.server} with a real node "
        f"(ready in {cluster.startup_seconds or 0:.1f} s).\n"
        f"Point kubectl at it (use this kubectl: an older one may be first on PATH):\n"
        f"  {export_lines(state).replace(chr(10), chr(10) + '  ').rstrip()}\n"
        f"  or: eval \"$(towline-dev cluster env)\"\n"
        f"People: kubectl --context admin|alice|bob|carol  (alice, carol: team-a; bob: team-b, approvers)\n"
        f"The node has the images {TOWLINE_IMAGE} and {RUNNER_IMAGE}; install the chart there with\n"
        f"  {helm.replace(chr(10), chr(10) + '  ')}\n"
        f"Component logs: {cluster.plane.logs_dir} and {cluster.node.paths.logs_dir}\n"
        f"Press Ctrl-C (or run `towline-dev cluster down`) to stop; nothing is left behind."
    )


def _env(home: Path) -> int:
    state = read_state(home)
    if state is None:
        print("no dev cluster is running; start one with `towline-dev cluster up`", file=sys.stderr)
        return 1
    sys.stdout.write(export_lines(state))
    return 0


def _down(home: Path, timeout: float = 120.0) -> int:
    state = read_state(home)
    if state is None:
        state_file(home).unlink(missing_ok=True)
        print("no dev cluster is running", file=sys.stderr)
        return 0
    pid = int(state["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(pid):
        print(f"error: the dev cluster (pid {pid}) did not stop within {timeout:.0f} s; its log says why",
              file=sys.stderr)
        return 1
    print(f"stopped the dev cluster (pid {pid})", file=sys.stderr)
    return 0


def cluster_main(argv: list[str]) -> int:
    """Entry point of `towline-dev cluster ...`; `argv` excludes the words before `up|down|env`."""
    parser = argparse.ArgumentParser(prog="towline-dev cluster",
                                     description="A local Kubernetes control plane with a real node (needs root)")
    parser.add_argument("--home", type=Path, default=None, help=f"state directory (default: {default_home()})")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="start it in the foreground; Ctrl-C stops it")
    commands.add_parser("env", help="print export lines for the running cluster")
    commands.add_parser("down", help="stop the running cluster")
    args = parser.parse_args(argv)
    home: Path = args.home or default_home()
    if args.command == "up":
        return _up(home)
    if args.command == "env":
        return _env(home)
    return _down(home)
