"""The suite collects unit and integration tests in one pytest session (tests/suite.py) with rootdir-relative
imports and no packages: two test modules of the same file name would fail collection ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).parents[1]


def test_every_test_module_has_a_name_of_its_own() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
