"""Each test file's measured seconds, kept between runs of the suite, so the concurrent part hands out its longest
files first from what they took last time (tests.workers.longest_first) instead of a list kept by hand.

`python -m tests.suite` gives every part it starts a file to write its files' seconds to (`DURATIONS_OUT`: the sum
of setup, call and teardown of the file's tests, as pytest's `--durations` reports them), and when the parts have
ended adds them to the record in the build cache (`record_path()`, outside the repository: a measurement of this
machine, not of the code). Before the next run it hands the concurrent part's workers a copy of the record
(`DURATIONS_SEEN`), taken once, so every worker orders the same files the same way (xdist refuses workers that
collected different orders). A fresh clone has no record: the hand-kept list decides, as before.

Never used for anything but the order: a test's outcome never depends on it.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from towline_dev.binaries import cache_root

DURATIONS_OUT = "TOWLINE_TEST_DURATIONS_OUT"
"""Environment variable: where a pytest session (the xdist controller, or a plain session) writes its files' seconds
when it ends."""
DURATIONS_SEEN = "TOWLINE_TEST_DURATIONS_SEEN"
"""Environment variable: a copy of the record, taken by the suite runner before the run, for the workers' order."""


def record_path() -> Path:
    """The record of the files' seconds on this machine."""
    return cache_root() / "test-durations.json"


def read(path: Path) -> dict[str, float]:
    """The seconds in `path`: file path (relative to the repository) to seconds; empty if there is none yet, or if
    it is not such a record (a broken record only costs the order)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(name): float(seconds) for name, seconds in found.items()
            if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds >= 0}


def write(path: Path, seconds: Mapping[str, float]) -> None:
    """`seconds` as the whole of `path`, replaced at once (a reader sees the old record or the new, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(handle, "w") as out:
        json.dump(dict(sorted(seconds.items())), out, indent=0)
    os.replace(temporary, path)


def add(record: Path, measured: Mapping[str, float]) -> None:
    """The files of `measured` take their new seconds in `record`; the others keep theirs (a run of a part, or of a
    selection, measures only its own files). Under a lock: more than one suite may end at once."""
    if not measured:
        return
    record.parent.mkdir(parents=True, exist_ok=True)
    with open(record.with_name(record.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        write(record, {**read(record), **measured})


def seen() -> dict[str, float]:
    """The record as the suite runner handed it to this run (DURATIONS_SEEN); empty outside the suite."""
    path = os.environ.get(DURATIONS_SEEN)
    return read(Path(path)) if path else {}


class FileSeconds:
    """A pytest plugin summing each file's tests' seconds (setup, call, teardown) as reports arrive, and writing them
    to DURATIONS_OUT at the session's end. Registered only where reports of every test arrive once: in the xdist
    controller or a plain session, not in a worker (its reports reach the controller too)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: object) -> None:
        nodeid, duration = getattr(report, "nodeid", ""), getattr(report, "duration", 0.0)
        path = nodeid.split("::", 1)[0]
        if path:
            self.seconds[path] = self.seconds.get(path, 0.0) + float(duration)

    def pytest_sessionfinish(self) -> None:
        write(self.out, self.seconds)
