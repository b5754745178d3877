"""docs/security.md is the single truth of who may do what: every test it names as proof must exist.

A row whose proving test was renamed or deleted is a claim nobody checks any more, so a reference
that does not resolve to a test function fails here. References are written as the table writes
them: `attacks/…` and bare file names in `tests/integration/`, `tests/unit/…` from the root, a
bare unit file name found anywhere under `tests/`, and `::test_name` continuing the file before it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"
REFERENCE = re.compile(r"`((?:[\w/]+\.py)?(?:::\w+)?)`")


def resolve(file_name: str) -> Path | None:
    """The test file a reference names, by the table's conventions, or None."""
    for candidate in (ROOT / file_name, ROOT / "tests" / "integration" / file_name):
        if candidate.is_file():
            return candidate
    matches = sorted((ROOT / "tests").rglob(Path(file_name).name)) if "/" not in file_name else []
    return matches[0] if len(matches) == 1 else None


def references(text: str) -> list[tuple[str, str | None]]:
    """(file, test function or None) for every code span that names a test file or a `::test`."""
    found: list[tuple[str, str | None]] = []
    for line in text.splitlines():
        current: str | None = None
        for span in REFERENCE.findall(line):
            file_part, _, test = span.partition("::")
            if file_part:
                if not Path(file_part).name.startswith("test_"):
                    continue
                current = file_part
            if current is None:
                continue
            found.append((current, test or None))
    return found


def test_the_document_names_many_proving_tests() -> None:
    assert len(references(DOC.read_text())) > 60


def test_every_test_the_security_document_names_exists() -> None:
    missing: list[str] = []
    for file_name, test in references(DOC.read_text()):
        path = resolve(file_name)
        if path is None:
            missing.append(f"{file_name}: no such test file")
        elif test and not re.search(rf"^(async )?def {test}\(", path.read_text(), re.MULTILINE):
            missing.append(f"{file_name}::{test}: no such test")
    assert missing == [], "docs/security.md names tests that do not exist:\n" + "\n".join(missing)


def test_a_stale_reference_is_reported() -> None:
    """The check can fail: a renamed test is caught."""
    stale = "| x | y | z | `attacks/test_attack_approvals.py::test_that_was_renamed` |"
    (file_name, test), = references(stale)
    path = resolve(file_name)
    assert path is not None and test is not None
    assert not re.search(rf"^def {test}\(", path.read_text(), re.MULTILINE)
