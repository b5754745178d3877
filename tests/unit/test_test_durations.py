"""The suite's record of each test file's seconds (tests/durations.py), from which the concurrent part hands out its
longest files first (tests.workers.longest_first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests import durations
from tests.suite import Measured
from tests.workers import LONGEST_FIRST, longest_first

REPO = Path(__file__).parents[2]


def test_measured_seconds_order_the_files_longest_first_and_the_unmeasured_before_them() -> None:
    paths = ["tests/unit/a.py", "tests/integration/long.py", "tests/unit/a.py", "tests/new.py",
             "tests/integration/middle.py", "tests/integration/long.py"]
    measured = {"tests/unit/a.py": 0.5, "tests/integration/long.py": 300.0, "tests/integration/middle.py": 40.0,
                LONGEST_FIRST[0]: 1000.0}
    assert [paths[i] for i in longest_first(paths, measured)] == [
        "tests/new.py", "tests/integration/long.py", "tests/integration/long.py", "tests/integration/middle.py",
        "tests/unit/a.py", "tests/unit/a.py"]
    assert longest_first(paths, measured)[1:3] == [1, 5], "a file's tests keep their order"
    assert longest_first(paths, {}) == longest_first(paths), "no record (a fresh clone): the hand-kept list"


def test_the_record_takes_each_runs_files_and_keeps_the_others(tmp_path: Path) -> None:
    record = tmp_path / "cache" / "test-durations.json"
    assert durations.read(record) == {}
    durations.add(record, {"tests/a.py": 10.0, "tests/b.py": 2.0})
    durations.add(record, {"tests/b.py": 3.5, "tests/c.py": 1.0})
    durations.add(record, {})
    assert durations.read(record) == {"tests/a.py": 10.0, "tests/b.py": 3.5, "tests/c.py": 1.0}
    assert sorted(path.name for path in record.parent.iterdir()) == ["test-durations.json", "test-durations.json.lock"]


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"tests/a.py": "long"}', '{"tests/a.py": -1}',
                                  '{"tests/a.py": true}'])
def test_a_broken_record_orders_nothing(tmp_path: Path, text: str) -> None:
    record = tmp_path / "test-durations.json"
    record.write_text(text)
    assert durations.read(record) == {}


def test_a_pytest_session_writes_its_files_seconds_where_the_suite_asks(tmp_path: Path) -> None:
    tests = tmp_path / "checks"
    tests.mkdir()
    (tests / "test_two.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (tests / "test_fails.py").write_text("def test_fails():\n    assert False\n")
    out = tmp_path / "part.json"
    plugin = tmp_path / "plugin.py"
    plugin.write_text("from pathlib import Path\n\nfrom tests.durations import FileSeconds\n\n"
                      "def pytest_configure(config):\n"
                      f"    config.pluginmanager.register(FileSeconds(Path({str(out)!r})))\n")
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          "-p", "plugin", "--rootdir", str(tmp_path), "-c", "/dev/null", str(tests)],
                         cwd=tmp_path, env={"PYTHONPATH": f"{tmp_path}:{REPO}:{REPO / 'devtools'}",
                                            "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # the failing test is measured too
    seconds = durations.read(out)
    assert sorted(seconds) == ["checks/test_fails.py", "checks/test_two.py"], ran.stdout
    assert all(value > 0 for value in seconds.values())


def test_a_file_in_a_world_and_in_the_concurrent_part_is_recorded_as_the_concurrent_part_took_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOWLINE_CACHE_DIR", str(tmp_path / "cache"))
    durations.add(durations.record_path(), {"tests/integration/helm/test_helm_install.py": 1.0, "tests/old.py": 7.0})
    measured = Measured()
    concurrent, helm = measured.env("concurrent"), measured.env("exclusive: helm")
    assert durations.read(Path(helm[durations.DURATIONS_SEEN])) == {
        "tests/integration/helm/test_helm_install.py": 1.0, "tests/old.py": 7.0}, "the record as the run began"
    durations.write(Path(concurrent[durations.DURATIONS_OUT]), {"tests/integration/helm/test_helm_install.py": 40.0})
    durations.write(Path(helm[durations.DURATIONS_OUT]), {"tests/integration/helm/test_helm_install.py": 380.0,
                                                         "tests/integration/helm/test_readme_walkthrough.py": 500.0})
    measured.keep()
    assert durations.read(durations.record_path()) == {
        "tests/integration/helm/test_helm_install.py": 40.0, "tests/integration/helm/test_readme_walkthrough.py": 500.0,
        "tests/old.py": 7.0}
