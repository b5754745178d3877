"""Running a code step's code in a process of its own (towline_connectors.codehost), within its limits.

The runner starts the host process with an empty environment and a new session,
hands it the request on stdin, and streams what the code prints into the step's
log through the step's redactor (line by line, each line and the whole log capped).
Before the first host starts, the runner makes itself non-dumpable
(`prctl(PR_SET_DUMPABLE, 0)`): the code runs as the runner's user id, and would
otherwise `ptrace` the runner (stop it, so no time limit holds), read its memory
and environment, or write its stdout past the redactor through /proc/1/fd/1.
With no capability to trace (the pod drops them all) the kernel refuses each.
It keeps the wall clock: at the deadline the host's process group is killed, and
once the host has exited anything the code left behind in its group goes too (a
process that escaped the group ends with the pod, whose first process is the runner).
The result comes back on a pipe of its own, read up to a cap, so nothing the code
prints can pass for its result.

Blocking (threads and a subprocess): code actions call `run_sandboxed` through
`run_blocking`, which the step deadline can abandon.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

HOST_COMMAND = (sys.executable, "-I", "-u", "-m", "towline_connectors.codehost")
"""Isolated mode (no PYTHON* variables, no user site, no current directory on the path), unbuffered output."""
RESULT_READ_LIMIT = 1 << 20
LOG_LINE_LIMIT = 16_384
"""Characters of one logged line; the rest is cut (a megabyte-long line is data, not a log)."""
LOG_TOTAL_LIMIT = 4 << 20
"""Bytes of log the code may write in all; past it the log says it was cut, and the code keeps running."""
DRAIN_SECONDS = 2.0
"""How long the log and result readers may take after the host exits (a forked child may hold the pipes)."""
HOST_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}  # noqa: S108
PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


@dataclass(frozen=True)
class SandboxLimits:
    """What the host process gets: a wall clock, a process count, and (Python) an address-space size."""

    wall_seconds: float
    max_processes: int
    address_space_bytes: int | None = None


@dataclass(frozen=True)
class SandboxOutcome:
    """How the host process ended: its result document (None when it wrote none or a bad one), exit, timing."""

    document: dict[str, Any] | None
    returncode: int
    timed_out: bool
    seconds: float
    log_cut: bool = False

    def describe_exit(self) -> str:
        """Why there is no result, for the step's message."""
        if self.returncode < 0:
            name = signal.Signals(-self.returncode).name if -self.returncode in signal.valid_signals() else "?"
            if self.returncode == -signal.SIGKILL:
                return (f"the code's process was killed ({name}), most likely for using more memory than the "
                        "step's limit; raise with.memory or use less")
            return f"the code's process was ended by signal {name}"
        return f"the code's process exited with status {self.returncode} without a result"


class _LogPump(threading.Thread):
    """Copies one of the host's output pipes into the step log, a line at a time, within the caps."""

    def __init__(self, pipe: IO[bytes], write_line: Callable[[str], None], budget: list[int]) -> None:
        super().__init__(name="towline-code-log", daemon=True)
        self.pipe = pipe
        self.write_line = write_line
        self.budget = budget
        self.cut = False

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in iter(lambda: self.pipe.readline(LOG_LINE_LIMIT * 4), b""):
                if self.budget[0] < len(raw):
                    if not self.cut:
                        self.cut = True
                        self.write_line(f"[the code's log was cut at {LOG_TOTAL_LIMIT} bytes]")
                    continue
                self.budget[0] -= len(raw)
                text = raw.decode("utf-8", "replace").rstrip("\n")
                if len(text) > LOG_LINE_LIMIT:
                    text = text[:LOG_LINE_LIMIT] + "…"
                self.write_line(text)


class _CappedReader(threading.Thread):
    """Reads a pipe to its end, keeping at most `limit` bytes."""

    def __init__(self, fd: int, limit: int) -> None:
        super().__init__(name="towline-code-result", daemon=True)
        self.fd = fd
        self.limit = limit
        self.data = bytearray()

    def run(self) -> None:
        with contextlib.suppress(OSError), os.fdopen(self.fd, "rb", closefd=True) as pipe:
            while chunk := pipe.read1(65536):
                room = self.limit - len(self.data)
                if room > 0:
                    self.data += chunk[:room]


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def make_untraceable() -> None:
    """This process (all its threads) non-dumpable: only a process with CAP_SYS_PTRACE may then trace it or open
    its /proc memory, environment and file descriptors. Raises OSError when the kernel refuses, so no code runs
    beside a runner it could trace. A child keeps it until it executes a program (the host is dumpable again,
    which it may be: it is the code's own process)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"could not make the runner non-dumpable (prctl): {os.strerror(error)}")


def run_sandboxed(
    request: Mapping[str, Any], payload: bytes, limits: SandboxLimits, write_line: Callable[[str], None],
) -> SandboxOutcome:
    """Run the host with `request` (and `payload` after it on stdin) and wait for its result or the deadline."""
    started = time.monotonic()
    make_untraceable()
    result_read, result_write = os.pipe()
    header = {
        **request,
        "resultFd": result_write,
        "maxProcesses": limits.max_processes,
        "addressSpaceBytes": limits.address_space_bytes,
        "moduleBytes": len(payload),
    }
    try:
        process = subprocess.Popen(
            HOST_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(result_write,), env=dict(HOST_ENVIRONMENT), cwd="/tmp",  # noqa: S108
            start_new_session=True,
        )
    finally:
        os.close(result_write)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    budget = [LOG_TOTAL_LIMIT]
    pumps = [_LogPump(process.stdout, write_line, budget), _LogPump(process.stderr, write_line, budget)]
    reader = _CappedReader(result_read, RESULT_READ_LIMIT)
    for thread in (*pumps, reader):
        thread.start()
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        process.stdin.write(payload)
    with contextlib.suppress(BrokenPipeError):
        process.stdin.close()
    timed_out = False
    try:
        process.wait(timeout=max(0.1, limits.wall_seconds))
    except subprocess.TimeoutExpired:
        timed_out = True
    _kill_group(process)  # at the deadline the code; after a clean exit whatever it forked and left behind
    process.wait()
    for thread in (reader, *pumps):
        thread.join(DRAIN_SECONDS)
    document = None if timed_out else _parse(bytes(reader.data))
    return SandboxOutcome(document, process.returncode, timed_out, time.monotonic() - started,
                          log_cut=any(pump.cut for pump in pumps))


def _parse(data: bytes) -> dict[str, Any] | None:
    if not data:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return document if isinstance(document, dict) and isinstance(document.get("ok"), bool) else None
