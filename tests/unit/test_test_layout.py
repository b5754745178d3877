"""The suite collects unit and integration tests in one pytest session (tests/suite.py) with rootdir-relative
imports and no packages: two test modules of the same file name would fail collection ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.workers import LONGEST_FIRST, longest_first

TESTS = Path(__file__).parents[1]


def test_every_test_module_has_a_name_of_its_own() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


def test_the_longest_files_the_suite_hands_out_first_exist_and_go_first_in_their_order() -> None:
    assert [path for path in LONGEST_FIRST if not (TESTS.parent / path).is_file()] == [], "renamed or removed"
    paths = ["tests/unit/a.py", "tests/unit/a.py", LONGEST_FIRST[1], "tests/unit/b.py", LONGEST_FIRST[0],
             LONGEST_FIRST[0]]
    assert [paths[i] for i in longest_first(paths)] == [
        LONGEST_FIRST[0], LONGEST_FIRST[0], LONGEST_FIRST[1], "tests/unit/a.py", "tests/unit/a.py", "tests/unit/b.py"]
    assert longest_first(paths)[:2] == [4, 5], "a file's tests keep their order"


def test_most_unit_files_run_among_the_integration_files_after_the_longest_and_a_quarter_at_the_end() -> None:
    unit = [f"tests/unit/u{n}.py" for n in range(8)]
    integration = [f"tests/integration/i{n}.py" for n in range(3)]
    paths = [*integration, LONGEST_FIRST[0], *unit]
    order = [paths[i] for i in longest_first(paths)]
    assert order == [LONGEST_FIRST[0], integration[0], *unit[0:2], integration[1], *unit[2:4], integration[2],
                     *unit[4:6], *unit[6:8]]
