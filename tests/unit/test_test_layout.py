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
    paths = ["tests/unit/a.py", LONGEST_FIRST[1], "tests/unit/b.py", LONGEST_FIRST[0], LONGEST_FIRST[0],
             "tests/unit/a.py"]
    assert [paths[i] for i in longest_first(paths)] == [
        LONGEST_FIRST[0], LONGEST_FIRST[0], LONGEST_FIRST[1], "tests/unit/a.py", "tests/unit/b.py", "tests/unit/a.py"]
    assert longest_first(paths)[:2] == [3, 4], "a file's tests keep their order"
