"""towline_dev.previous: an earlier commit is exported as it was, and one the clone lacks is an error saying why."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from towline_dev.previous import CommitUnavailable, ensure_previous_release, export_tree, require_commit


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com",
                             "-c", "init.defaultBranch=main", *args],
                            capture_output=True, text=True, check=True, timeout=60)
    return result.stdout.strip()


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository of two commits that change one file: (repository, first SHA, second SHA)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    shas = []
    for text in ("old\n", "new\n"):
        (repo / "chart.txt").write_text(text)
        _git(repo, "add", "chart.txt")
        _git(repo, "commit", "-q", "-m", text.strip())
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas[0], shas[1]


def test_an_earlier_commit_is_exported_as_it_was_and_the_checkout_is_untouched(
    history: tuple[Path, str, str], tmp_path: Path,
) -> None:
    repo, first, _ = history
    require_commit(repo, first)
    tree = export_tree(repo, first, tmp_path / "export")
    assert (tree / "chart.txt").read_text() == "old\n"
    assert (repo / "chart.txt").read_text() == "new\n"
    assert _git(repo, "status", "--porcelain") == ""


def test_a_commit_a_shallow_clone_lacks_is_refused_saying_the_clone_is_shallow(
    history: tuple[Path, str, str], tmp_path: Path,
) -> None:
    repo, first, second = history
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True, timeout=60)
    require_commit(shallow, second)
    with pytest.raises(CommitUnavailable, match=rf"commit {first} is not in this clone: this is a shallow clone"):
        require_commit(shallow, first)


def test_a_commit_no_clone_has_is_refused_naming_it(history: tuple[Path, str, str]) -> None:
    repo, _, _ = history
    missing = "0" * 40
    with pytest.raises(CommitUnavailable, match=rf"commit {missing} is not in this clone: fetch it"):
        require_commit(repo, missing)


def test_a_short_sha_is_refused_before_anything_is_built() -> None:
    with pytest.raises(ValueError, match="full 40-character SHA"):
        ensure_previous_release("6d0e67d", lambda _: None)
