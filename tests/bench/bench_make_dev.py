"""Warm `make dev` start: the command to the walkthrough printed (the demo run at its approval), then Ctrl-C.

Runs `make dev` RUNS times (default 3) from the repository root, each only once the
machine's node lock is free (a start that waits for another node would measure the
wait; such runs are reported and not counted), reads stdout until the walkthrough's last
line, then sends SIGINT to its process group as a terminal's Ctrl-C does and times the
exit. Needs root, like `make dev`. ``python -m tests.bench.bench_make_dev [RUNS]``.
"""

from __future__ import annotations

import fcntl
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

from towline_dev import REPO_ROOT
from towline_dev.devenv import READY_LINE
from towline_dev.node.realnode import NODE_LOCK


def _wait_until_no_node_runs() -> None:
    while True:
        with NODE_LOCK.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(handle, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                pass
        time.sleep(2)


def one_start() -> tuple[float | None, float, bool]:
    """(seconds to the walkthrough or None, seconds from Ctrl-C to exit, whether it waited for another node)."""
    _wait_until_no_node_runs()
    started = time.monotonic()
    process = subprocess.Popen(["make", "dev"], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    progress: list[str] = []
    assert process.stdout is not None and process.stderr is not None
    errors = process.stderr
    threading.Thread(target=lambda: progress.extend(errors), daemon=True).start()
    ready = None
    for line in process.stdout:
        if READY_LINE in line:
            ready = time.monotonic() - started
            break
    interrupted = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    process.wait(timeout=300)
    waited = any("waiting for it to stop" in line for line in progress)
    return ready, time.monotonic() - interrupted, waited


def main(runs: int = 3) -> None:
    if os.geteuid() != 0:
        print("bench_make_dev: skipped (make dev needs root)")
        return
    ready_times: list[float] = []
    stop_times: list[float] = []
    for attempt in range(1, 2 * runs + 1):
        ready, stop, waited = one_start()
        counted = ready is not None and not waited
        print(f"make dev attempt {attempt}: walkthrough printed after "
              f"{'-' if ready is None else f'{ready:.1f} s'}, Ctrl-C to exit {stop:.1f} s"
              f"{' (waited for another node: not counted)' if waited else ''}", flush=True)
        if counted and ready is not None:
            ready_times.append(ready)
            stop_times.append(stop)
        if len(ready_times) == runs:
            break
    if ready_times:
        print(f"make dev warm start over {len(ready_times)} runs: median {statistics.median(ready_times):.1f} s "
              f"(min {min(ready_times):.1f}, max {max(ready_times):.1f}); Ctrl-C to exit median "
              f"{statistics.median(stop_times):.1f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
