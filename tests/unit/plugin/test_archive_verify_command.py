"""`kubectl towline verify FILE --key PEM`: an export verifies offline with only the public key, and a changed,
removed or reordered record fails it, naming the record."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline.archive.chain import public_key_pem
from towline.archive.records import RunIndex
from towline.archive.store import open_store
from towline.plugin.cli import main

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.fixture
def export(tmp_path: Path) -> tuple[Path, Path]:
    store = open_store(f"sqlite:///{tmp_path / 'archive.db'}", now=NOW)
    try:
        for number in range(1, 5):
            store.append("ops", "run", f"uid-{number}", {"run": {"metadata": {"name": f"deploy-{number}"}}},
                         index=RunIndex(name=f"deploy-{number}", workflow="deploy", phase="Succeeded",
                                        requester="carol", started_at=NOW),
                         recorded_at=NOW)
        store.sign_head("ops", KEY, NOW)
        lines = list(store.export("ops"))
    finally:
        store.close()
    path, key = tmp_path / "audit.jsonl", tmp_path / "public.pem"
    path.write_text("".join(lines))
    key.write_bytes(public_key_pem(KEY.public_key()))
    return path, key


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def entry_line(lines: list[str], seq: int) -> int:
    return next(i for i, line in enumerate(lines) if json.loads(line).get("entry", {}).get("seq") == seq)


def test_an_untouched_export_verifies_offline(export: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path, key = export
    assert main(["verify", str(path), "--key", str(key)]) == 0
    assert "ops: verified 4 records (seq 1-4), 1 signed checkpoints; signed through seq 4" in capsys.readouterr().out


def test_a_changed_record_fails_naming_it(export: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path, key = export
    lines = lines_of(path)
    at = entry_line(lines, 2)
    lines[at] = lines[at].replace("deploy-2", "deploy-X")
    path.write_text("".join(lines))
    assert main(["verify", str(path), "--key", str(key)]) == 1
    err = capsys.readouterr().err
    assert "ops: does NOT verify: record 2 (run uid-2) changed" in err


def test_a_removed_and_a_reordered_record_fail_naming_them(export: tuple[Path, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path, key = export
    lines = lines_of(path)
    removed = [line for i, line in enumerate(lines) if i != entry_line(lines, 3)]
    path.write_text("".join(removed))
    assert main(["verify", str(path), "--key", str(key)]) == 1
    assert "record 3 removed" in capsys.readouterr().err
    swapped = list(lines)
    two, three = entry_line(lines, 2), entry_line(lines, 3)
    swapped[two], swapped[three] = lines[three], lines[two]
    path.write_text("".join(swapped))
    assert main(["verify", str(path), "--key", str(key)]) == 1
    assert "reordered" in capsys.readouterr().err


def test_another_key_does_not_verify_and_a_missing_key_file_says_which(
    export: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path, _ = export
    other = tmp_path / "other.pem"
    other.write_bytes(public_key_pem(Ed25519PrivateKey.generate().public_key()))
    assert main(["verify", str(path), "--key", str(other)]) == 1
    assert "does NOT verify" in capsys.readouterr().err
    assert main(["verify", str(path), "--key", str(tmp_path / "absent.pem")]) == 2
    assert "--key" in capsys.readouterr().err
