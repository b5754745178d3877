"""The suite collects unit and integration tests in one pytest session (tests/suite.py) with rootdir-relative
imports and no packages: two test modules of the same file name would fail collection ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.suite import concurrent_marks, exclusive_worlds, parse
from tests.workers import IN_THE_WORLDS, LONGEST_FIRST, longest_first

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


def test_the_worlds_files_leave_the_concurrent_part_only_when_both_parts_run_side_by_side() -> None:
    moved = [path for paths in IN_THE_WORLDS.values() for path in paths]
    assert moved and [path for path in moved if not (TESTS.parent / path).is_file()] == []
    assert len(set(moved)) == len(moved), "a file runs in one world"
    assert sorted(IN_THE_WORLDS) == ["helm_world", "rest_world"]

    def marks(args: list[str]) -> str:
        return args[len(args) - 1 - args[::-1].index("-m") + 1]  # pytest keeps the last -m

    whole, _ = parse([])
    assert concurrent_marks(whole, ["tests"]) == "not exclusive and not helm_world and not rest_world"
    worlds = dict(exclusive_worlds(whole, ["tests"]))
    assert marks(worlds["exclusive: rest"]) == "exclusive or rest_world"
    assert marks(worlds["exclusive: helm"]) == "exclusive or helm_world"
    assert set(IN_THE_WORLDS["helm_world"]) <= set(worlds["exclusive: helm"]), "the Helm world selects by path"
    for argv, selection in ((["--only", "concurrent"], ["tests"]), (["--random-order"], ["tests"]),
                            (["--one-after-the-other"], ["tests"]), ([], ["tests/integration"])):
        options, _ = parse(argv)
        assert concurrent_marks(options, selection) == "not exclusive", argv
        assert all(marks(args) == "exclusive" for _, args in exclusive_worlds(options, selection)), argv
