"""`towline-dev cluster up|down|env`: a local control plane for people, in the foreground.

`up` finds (or builds once) the pinned binaries, starts the control plane and the
step executor, prints how to point kubectl at it, records itself in a state file
and tears everything down on Ctrl-C or SIGTERM. `env` prints the export lines for
the running cluster; `down` stops it through the pid in the state file.

Imports no Kubernetes client (the executor runs as its own process), so the
`towline` CLI may call `cluster_main` without breaking the import contracts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from towline_dev.binaries import BinariesUnavailable, cache_root, find_binaries
from towline_dev.controlplane import ControlPlane, ControlPlaneError
from towline_dev.processes import spawn, stop_process
from towline_dev.versions import KUBERNETES_VERSION


def default_home() -> Path:
    """Where the one dev cluster of this user keeps its state (outside any repository)."""
    return cache_root() / "dev-cluster"


def state_file(home: Path) -> Path:
    return home / "cluster.json"


def read_state(home: Path) -> dict[str, Any] | None:
    """The running cluster's record, or None when none is recorded or its process is gone."""
    try:
        state: dict[str, Any] = json.loads(state_file(home).read_text())
    except (OSError, ValueError):
        return None
    return state if _alive(int(state.get("pid", 0))) else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def export_lines(state: dict[str, Any]) -> str:
    return f"export KUBECONFIG={state['kubeconfig']}\nexport PATH={state['binDir']}:$PATH\n"


def start_dev_cluster(
    home: Path, namespaces: list[str] | None = None
) -> tuple[ControlPlane, subprocess.Popen[bytes], dict[str, Any]] | None:
    """Control plane + step executor process, recorded in the state file; None (said why) on failure.

    Shared by `towline-dev cluster up` and `towline-dev`, which must never run two clusters
    over one state directory.
    """
    running = read_state(home)
    if running is not None:
        print(f"A dev cluster is already running (pid {running['pid']}); stop it with "
              "`towline-dev cluster down` or use it:\n" + export_lines(running), file=sys.stderr)
        return None
    try:
        binaries = find_binaries()
    except BinariesUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return None
    plane = ControlPlane(binaries, home / "state")
    try:
        plane.start()
    except ControlPlaneError as error:
        print(f"error: the control plane did not start:\n{error}", file=sys.stderr)
        return None
    executor_argv = [sys.executable, "-m", "towline_dev.stepexecutor",
                     "--kubeconfig", str(plane.executor_kubeconfig), "--work-dir", str(home / "state" / "executor")]
    for namespace in namespaces or []:
        executor_argv += ["--namespace", namespace]
    executor = spawn(executor_argv, log_path=plane.log_path("step-executor"))
    state = {
        "pid": os.getpid(), "executorPid": executor.pid, "kubeconfig": str(plane.kubeconfig),
        "binDir": str(binaries.path("kubectl").parent), "server": plane.server, "stateDir": str(plane.state_dir),
        "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    state_file(home).write_text(json.dumps(state, indent=2) + "\n")
    return plane, executor, state


def _up(home: Path, namespaces: list[str] | None) -> int:
    started = start_dev_cluster(home, namespaces)
    if started is None:
        return 1
    plane, executor, state = started
    print(_banner(plane, state), flush=True)
    try:
        while executor.poll() is None and plane.is_running():
            time.sleep(0.5)
        print("error: a component exited; logs are in " + str(plane.logs_dir), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping the dev cluster…", file=sys.stderr)
        return 0
    finally:
        stop_process(executor, grace_seconds=10)
        plane.stop()
        state_file(home).unlink(missing_ok=True)


def _banner(plane: ControlPlane, state: dict[str, Any]) -> str:
    startup = f"{plane.startup_seconds:.1f} s" if plane.startup_seconds is not None else "?"
    return (
        f"Towline dev cluster is up: Kubernetes {KUBERNETES_VERSION} at {plane.server} (ready in {startup}).\n"
        f"Point kubectl at it (use this kubectl: an older one may be first on PATH):\n"
        f"  {export_lines(state).replace(chr(10), chr(10) + '  ').rstrip()}\n"
        f"  or: eval \"$(towline-dev cluster env)\"\n"
        f"People: kubectl --context admin|alice|bob|carol  (alice, carol: team-a; bob: team-b, approvers)\n"
        f"Pod processes log to {Path(state['stateDir']) / 'executor' / 'logs'}/<namespace>/<pod>.log "
        f"(`kubectl logs` needs a kubelet; there is none).\n"
        f"Component logs: {plane.logs_dir}\n"
        f"Press Ctrl-C (or run `towline-dev cluster down`) to stop."
    )


def _env(home: Path) -> int:
    state = read_state(home)
    if state is None:
        print("no dev cluster is running; start one with `towline-dev cluster up`", file=sys.stderr)
        return 1
    sys.stdout.write(export_lines(state))
    return 0


def _down(home: Path, timeout: float = 60.0) -> int:
    state = read_state(home)
    if state is None:
        state_file(home).unlink(missing_ok=True)
        print("no dev cluster is running", file=sys.stderr)
        return 0
    pid = int(state["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        # Its children die with it (PR_SET_PDEATHSIG).
        os.kill(pid, signal.SIGKILL)
        state_file(home).unlink(missing_ok=True)
    print(f"stopped the dev cluster (pid {pid})", file=sys.stderr)
    return 0


def cluster_main(argv: list[str]) -> int:
    """Entry point of `towline-dev cluster ...`; `argv` excludes the words before `up|down|env`."""
    parser = argparse.ArgumentParser(prog="towline-dev cluster", description="A real local Kubernetes control plane")
    parser.add_argument("--home", type=Path, default=None, help=f"state directory (default: {default_home()})")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start it in the foreground; Ctrl-C stops it")
    up.add_argument("--namespace", action="append", help="run pods only from these namespaces (repeatable)")
    commands.add_parser("env", help="print export lines for the running cluster")
    commands.add_parser("down", help="stop the running cluster")
    args = parser.parse_args(argv)
    home: Path = args.home or default_home()
    home.mkdir(parents=True, exist_ok=True)
    if args.command == "up":
        return _up(home, args.namespace)
    if args.command == "env":
        return _env(home)
    return _down(home)
