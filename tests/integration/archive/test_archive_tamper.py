"""Tampering as a database administrator would do it, with SQL straight against SQLite or PostgreSQL (a row
changed, a row deleted, two rows swapped): verify fails and names the record, live and in an export. An
untouched export verifies offline with nothing but the public key's PEM."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from archive_support import KEY, NAMESPACE, T0, archive_approval, archive_log, archive_run, run_sql

from towline.archive import ArchiveStore, load_public_key, open_store, public_key_pem, verify_export
from towline.archive.chain import Checkpoint

pytestmark = pytest.mark.integration


@pytest.fixture
def signed_store(archive_url: str) -> Iterator[ArchiveStore]:
    """Six records (runs, an approval, a log) with a checkpoint at the head, as the archive leaves them."""
    store = open_store(archive_url, now=T0)
    for number in (1, 2, 3):
        archive_run(store, number)
    archive_approval(store, 3, "bob")
    archive_log(store, 3, "deploy", "deployed\n")
    archive_run(store, 4)
    store.sign_head(NAMESPACE, KEY, T0 + timedelta(minutes=10))
    assert store.verify(NAMESPACE, KEY.public_key()).ok
    yield store
    store.close()


def test_a_row_changed_in_the_database_fails_verification_naming_the_record(
    signed_store: ArchiveStore, archive_url: str,
) -> None:
    run_sql(archive_url, "UPDATE entries SET body = replace(body, '\"bob\"', '\"mallory\"') WHERE seq = 4")
    problem = signed_store.verify(NAMESPACE, KEY.public_key()).problem
    assert problem is not None
    assert (problem.what, problem.seq, problem.kind, problem.key) == ("changed", 4, "approval", "approval-3")


def test_a_row_deleted_from_the_database_fails_verification_naming_its_seq(
    signed_store: ArchiveStore, archive_url: str,
) -> None:
    run_sql(archive_url, "DELETE FROM entries WHERE seq = 2")
    problem = signed_store.verify(NAMESPACE, KEY.public_key()).problem
    assert problem is not None and (problem.what, problem.seq) == ("removed", 2)
    assert "(run uid-3)" in problem.message, "it names where the chain goes on"


def test_two_rows_swapped_in_the_database_fail_verification_naming_the_record(
    signed_store: ArchiveStore, archive_url: str,
) -> None:
    # Through a free seq: PostgreSQL checks the primary key row by row.
    run_sql(archive_url, "UPDATE entries SET seq = -1 WHERE seq = 2", "UPDATE entries SET seq = 2 WHERE seq = 5",
            "UPDATE entries SET seq = 5 WHERE seq = -1")
    problem = signed_store.verify(NAMESPACE, KEY.public_key()).problem
    assert problem is not None
    assert (problem.what, problem.seq, problem.kind, problem.key) == ("reordered", 2, "log", "pod-3-deploy-1/step")


def test_a_checkpoint_changed_in_the_database_fails_verification(signed_store: ArchiveStore, archive_url: str) -> None:
    run_sql(archive_url, "UPDATE checkpoints SET seq = 5")
    problem = signed_store.verify(NAMESPACE, KEY.public_key()).problem
    assert problem is not None and problem.what == "bad-checkpoint"


def test_an_untouched_export_verifies_offline_with_only_the_public_key(
    signed_store: ArchiveStore, tmp_path: Path,
) -> None:
    audit = tmp_path / "audit.jsonl"
    audit.write_text("".join(signed_store.export(NAMESPACE)))
    (tmp_path / "pub.pem").write_bytes(public_key_pem(KEY))
    signed_store.close()  # offline: the database plays no part from here
    public_key = load_public_key((tmp_path / "pub.pem").read_bytes())
    with audit.open() as lines:
        result = verify_export(lines, public_key)
    assert result.ok and (result.records, result.head_seq, result.signed_through, result.unsigned) == (6, 6, 6, 0)


@pytest.mark.parametrize(("edit", "what", "seq"), [
    (lambda lines: [line.replace('"carol"', '"mallory"', 1) if '"seq":1}' in line else line for line in lines],
     "changed", 1),
    (lambda lines: [line for line in lines if '"seq":3}' not in line or '"type":"entry"' not in line],
     "removed", 3),
    (lambda lines: [*lines[:3], lines[4], lines[3], *lines[5:]], "reordered", 2),
])
def test_an_edited_export_fails_offline_verification_naming_the_record(
    signed_store: ArchiveStore, edit: object, what: str, seq: int,
) -> None:
    lines = list(signed_store.export(NAMESPACE))
    assert lines[1].startswith('{"checkpoint"'), "header, one checkpoint, then the entries"
    problem = verify_export(edit(lines), KEY.public_key()).problem  # type: ignore[operator]
    assert problem is not None and (problem.what, problem.seq) == (what, seq)


def _checkpoint_at_head(store: ArchiveStore) -> Checkpoint:
    checkpoint = store.latest_checkpoint(NAMESPACE)
    assert checkpoint is not None and checkpoint.seq == 6
    return checkpoint


def test_the_hourly_pass_reads_on_from_a_verified_checkpoint_and_finds_a_later_change(
    signed_store: ArchiveStore, archive_url: str,
) -> None:
    """The archive's hourly pass goes on from the newest checkpoint the last pass verified: records written
    since are checked (a change there is named), records before it are left to the daily full pass."""
    anchor = _checkpoint_at_head(signed_store)
    for number in (5, 6):
        archive_run(signed_store, number)
    since = signed_store.verify(NAMESPACE, KEY.public_key(), since=anchor)
    assert since.ok and (since.records, since.first_seq, since.head_seq) == (2, 7, 8)
    run_sql(archive_url, "UPDATE entries SET body = replace(body, 'uid-6', 'uid-66') WHERE seq = 8")
    problem = signed_store.verify(NAMESPACE, KEY.public_key(), since=anchor).problem
    assert problem is not None and (problem.what, problem.seq, problem.key) == ("changed", 8, "uid-6")


def test_a_change_before_the_anchor_is_left_to_the_full_pass_which_names_it(
    signed_store: ArchiveStore, archive_url: str,
) -> None:
    anchor = _checkpoint_at_head(signed_store)
    run_sql(archive_url, "UPDATE entries SET body = replace(body, '\"bob\"', '\"mallory\"') WHERE seq = 4")
    assert signed_store.verify(NAMESPACE, KEY.public_key(), since=anchor).ok
    problem = signed_store.verify(NAMESPACE, KEY.public_key()).problem
    assert problem is not None and (problem.what, problem.seq) == ("changed", 4)


def test_the_anchor_checkpoint_changed_or_removed_since_fails_the_hourly_pass(
    signed_store: ArchiveStore, archive_url: str,
) -> None:
    anchor = _checkpoint_at_head(signed_store)
    run_sql(archive_url, "DELETE FROM checkpoints WHERE seq = 6")
    problem = signed_store.verify(NAMESPACE, KEY.public_key(), since=anchor).problem
    assert problem is not None and (problem.what, problem.seq) == ("bad-checkpoint", 6)
