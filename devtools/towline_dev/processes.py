"""Start and stop the local control plane's child processes without leaving orphans.

Three layers, because each one covers a way the others can miss:

- every child leads its own session (``start_new_session``), so a stop signals the
  whole process group, and a Ctrl-C in the terminal reaches only the Python parent,
  which then stops the children in order;
- on Linux each child asks the kernel for SIGKILL when its parent dies
  (``PR_SET_PDEATHSIG``), which also covers a parent killed with SIGKILL;
- the owner registers ``atexit`` and SIGTERM handling (see `controlplane`).

PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so start
children from a thread that lives as long as they do (the main thread, or the
thread that waits for them).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl: Callable[[int, int], int] = libc.prctl
    return prctl


# Looked up once here: the pre-exec hook runs between fork and exec and must do
# as little as possible (no imports, no allocation-heavy work).
_PRCTL = _load_prctl()


def _die_with_parent() -> None:
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


LOOPBACK_PORTS = range(15000, 30000)
"""Where `free_loopback_port` looks first: below the kernel's usual ephemeral range (32768-60999), and below
the NodePort range (30000-32767)."""


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller binds it soon after).

    Not one from `bind(0)`: that comes from the ephemeral range, where the kernel also picks the local end of
    every outgoing connection, and one made between this check and the caller's bind takes the port (seen: an
    ingress that could not start, "address already in use", in a busy suite). Ports below the range
    (`ip_local_port_range`) are never given to outgoing connections; `bind(0)` is the fallback if none is free.
    """
    ephemeral = _ephemeral_ports()
    usable = [port for port in random.sample(LOOPBACK_PORTS, k=min(64, len(LOOPBACK_PORTS))) if port not in ephemeral]
    for port in usable:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        chosen: int = probe.getsockname()[1]
        return chosen


def _ephemeral_ports() -> range:
    try:
        low, high = (int(part) for part in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return range(32768, 61000)
    return range(low, high + 1)


def alive(pid: int) -> bool:
    """Whether `pid` still runs. A process that has exited but was not yet reaped by its parent (a zombie:
    `cluster up` started by a program that waits for it later) has stopped, though signal 0 still reaches it."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def spawn(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a child in its own session, stdout and stderr appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - nothing but one prctl call runs there
        )


def signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the child's whole process group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def stop_process(process: subprocess.Popen[bytes], *, grace_seconds: float = 10.0) -> int:
    """SIGTERM the group, wait up to `grace_seconds`, then SIGKILL it; return the exit status."""
    if process.poll() is None:
        signal_group(process, signal.SIGTERM)
        signal_group(process, signal.SIGCONT)  # a stopped (SIGSTOP) process handles SIGTERM only once continued
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            signal_group(process, signal.SIGKILL)
            process.wait()
    # Helpers the child forked into its group must not outlive it either.
    signal_group(process, signal.SIGKILL)
    return process.returncode


def wait_for(
    condition: Callable[[], bool], *, timeout: float, interval: float = 0.1, what: str = "condition"
) -> None:
    """Poll `condition` until it is true; raise TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
