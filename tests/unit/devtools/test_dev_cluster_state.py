"""`towline-dev cluster env|down` find the running cluster through its state file: a recorded process that has
exited counts as gone, even while its parent has not reaped it yet (the `down` that waited on such a zombie
used to report that the cluster did not stop)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from towline_dev.cli import read_state, state_file


def record(home: Path, pid: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    state_file(home).write_text(json.dumps({"pid": pid, "kubeconfig": "k", "binDir": "b"}))


def test_a_running_process_is_the_running_cluster(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record(tmp_path, child.pid)
        state = read_state(tmp_path)
        assert state is not None and state["pid"] == child.pid
    finally:
        child.kill()
        child.wait()


def test_an_exited_process_not_yet_reaped_is_gone(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 30
    while stat.read_text().rpartition(")")[2].split()[0] != "Z":  # exited; this test has not waited for it
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.05)
    try:
        record(tmp_path, child.pid)
        assert read_state(tmp_path) is None
    finally:
        child.wait()


def test_a_pid_that_no_longer_exists_is_gone(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    record(tmp_path, child.pid)
    assert read_state(tmp_path) is None
