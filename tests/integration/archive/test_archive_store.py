"""The archive store on SQLite and on a real PostgreSQL server: appends that chain, once; the history query;
a run's approvals and logs; checkpoints; retention that leaves a chain that verifies."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from archive_support import KEY, NAMESPACE, T0, archive_approval, archive_log, archive_run, run_sql

from towline.archive import (
    ArchiveError,
    ArchiveStore,
    HistoryQuery,
    LogIndex,
    RunIndex,
    open_store,
    verify_export,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def store(archive_url: str) -> Iterator[ArchiveStore]:
    opened = open_store(archive_url, now=T0)
    yield opened
    opened.close()


def test_appends_chain_in_order_and_a_record_is_never_archived_twice(store: ArchiveStore) -> None:
    first = archive_run(store, 1)
    second = archive_run(store, 2)
    again = store.append(NAMESPACE, "run", "uid-1", {"other": "document"},
                         index=RunIndex(name="x", workflow="x", phase="Failed", requester="x", started_at=T0),
                         recorded_at=T0 + timedelta(hours=1))
    assert (first.seq, second.seq, second.prev_digest) == (1, 2, first.digest)
    assert again.created is False and again.entry == first
    assert store.head(NAMESPACE) == (2, second.digest)
    assert [entry.key for entry in store.entries(NAMESPACE)] == ["uid-1", "uid-2"]
    assert store.verify(NAMESPACE, KEY.public_key()).ok


def test_each_namespace_has_a_chain_of_its_own(store: ArchiveStore) -> None:
    archive_run(store, 1)
    other = archive_run(store, 2, namespace="team-b")
    assert other.seq == 1 and store.namespaces() == [NAMESPACE, "team-b"]


def test_history_filters_by_workflow_requester_approver_phase_time_and_label_newest_first(store: ArchiveStore) -> None:
    archive_run(store, 1, labels={"tier": "gold"}, approvers=("bob",))
    archive_run(store, 2, requester="dave", phase="Failed")
    archive_run(store, 3, workflow="nightly", labels={"tier": "gold"})
    archive_run(store, 4)
    archive_approval(store, 4, "erin")

    def names(**filters: object) -> list[str]:
        return [run.name for run in store.history(HistoryQuery(NAMESPACE, **filters)).runs]  # type: ignore[arg-type]

    assert names() == ["deploy-prod-4", "nightly-3", "deploy-prod-2", "deploy-prod-1"]
    assert names(workflow="deploy-prod") == ["deploy-prod-4", "deploy-prod-2", "deploy-prod-1"]
    assert names(requester="dave") == ["deploy-prod-2"]
    assert names(phase="Failed") == ["deploy-prod-2"]
    assert names(approver="bob") == ["deploy-prod-1"]
    assert names(approver="erin") == ["deploy-prod-4"], "an approval archived on its own counts"
    assert names(labels={"tier": "gold"}) == ["nightly-3", "deploy-prod-1"]
    assert names(started_from=T0 + timedelta(minutes=2), started_before=T0 + timedelta(minutes=4)) == \
        ["nightly-3", "deploy-prod-2"]
    assert names(workflow="deploy-prod", requester="carol", labels={"tier": "gold"}) == ["deploy-prod-1"]
    assert store.history(HistoryQuery("team-b")).runs == []


def test_history_pages_with_a_continue_token_and_refuses_one_it_did_not_give(store: ArchiveStore) -> None:
    for number in range(1, 8):
        archive_run(store, number, started=T0 if number in (3, 4, 5) else None)
    seen, token = [], None
    while True:
        page = store.history(HistoryQuery(NAMESPACE, limit=2, continue_token=token))
        seen.extend(run.name for run in page.runs)
        token = page.continue_token
        if token is None:
            break
    assert len(seen) == 7 and len(set(seen)) == 7, "runs that started at the same instant are neither lost nor repeated"
    with pytest.raises(ArchiveError, match="continue"):
        store.history(HistoryQuery(NAMESPACE, continue_token="eyJ2IjoxfQ"))
    with pytest.raises(ArchiveError, match="limit"):
        store.history(HistoryQuery(NAMESPACE, limit=0))


def test_a_run_is_found_by_uid_or_name_with_its_approvals_and_logs(store: ArchiveStore) -> None:
    archive_log(store, 1, "deploy", "deploying\n")
    archive_log(store, 1, "check", "checked\n")
    archive_log(store, 1, "deploy", "again\n", attempt=2)
    archive_approval(store, 1, "bob")
    archive_run(store, 1)
    archived = store.run(NAMESPACE, "deploy-prod-1")
    assert archived is not None and archived.uid == "uid-1" and store.run(NAMESPACE, "uid-1") == archived
    assert archived.entry.body["spec"] == {"workflowRef": {"name": "deploy-prod"}, "requestedBy": "carol"}
    assert [entry.body["text"] for entry in store.logs(NAMESPACE, "deploy-prod-1", "deploy")] == \
        ["deploying\n", "again\n"]
    assert len(store.logs(NAMESPACE, "uid-1")) == 3
    assert [entry.body["spec"]["decidedBy"] for entry in store.approvals(NAMESPACE, "deploy-prod-1")] == ["bob"]  # type: ignore[call-overload,index]
    assert store.run(NAMESPACE, "no-such-run") is None


def test_logs_of_a_run_still_in_flight_are_found_by_its_name(store: ArchiveStore) -> None:
    archive_log(store, 9, "deploy", "still running\n")
    assert [entry.body["text"] for entry in store.logs(NAMESPACE, "deploy-prod-9")] == ["still running\n"]


@pytest.mark.parametrize(("kind", "body", "index", "message"), [
    ("log", {"text": "x", "bytes": 1}, LogIndex("u", "r", "s", 1, "p", "c"), "truncated"),
    ("log", {"text": 1, "bytes": 1, "truncated": False}, LogIndex("u", "r", "s", 1, "p", "c"), "body.text"),
    ("run", {}, None, "RunIndex"),
    ("event", {}, None, "kind 'event'"),
    ("prune", {}, None, "prune"),
    ("run", {"n": float("nan")}, RunIndex("r", "w", "p", "c", T0), "canonical JSON"),
])
def test_a_record_the_store_cannot_keep_exactly_is_refused_naming_the_field(
    store: ArchiveStore, kind: str, body: dict[str, object], index: object, message: str,
) -> None:
    with pytest.raises(ArchiveError, match=message):
        store.append(NAMESPACE, kind, "k", body, index=index, recorded_at=T0)  # type: ignore[arg-type]
    assert store.head(NAMESPACE)[0] == 0


def test_two_writers_at_once_never_fork_or_gap_the_chain(store: ArchiveStore, archive_url: str) -> None:
    second = open_store(archive_url, now=T0)
    errors: list[BaseException] = []

    def write(writer: ArchiveStore, numbers: range) -> None:
        try:
            for number in numbers:
                archive_run(writer, number)
        except BaseException as error:  # reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(store, range(1, 41))),
               threading.Thread(target=write, args=(second, range(21, 61)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    second.close()
    assert errors == []
    assert [entry.seq for entry in store.entries(NAMESPACE)] == list(range(1, 61)), "no run twice, no gap"
    assert store.verify(NAMESPACE, KEY.public_key()).ok


def test_a_checkpoint_is_signed_only_when_the_head_moved(store: ArchiveStore) -> None:
    assert store.sign_head(NAMESPACE, KEY, T0) is None, "nothing to sign yet"
    archive_run(store, 1)
    checkpoint = store.sign_head(NAMESPACE, KEY, T0)
    assert checkpoint is not None and (checkpoint.seq, checkpoint.head_digest) == store.head(NAMESPACE)
    assert store.sign_head(NAMESPACE, KEY, T0 + timedelta(minutes=1)) is None
    assert store.latest_checkpoint(NAMESPACE) == checkpoint
    result = store.verify(NAMESPACE, KEY.public_key())
    assert result.ok and result.signed_through == 1 and result.unsigned == 0


def test_retention_prunes_old_records_and_the_chain_still_verifies_live_and_exported(store: ArchiveStore) -> None:
    for number in range(1, 11):
        archive_run(store, number)
        archive_log(store, number, "deploy", f"log {number}\n")
    store.sign_head(NAMESPACE, KEY, T0 + timedelta(minutes=20))
    archive_run(store, 11)
    prune = store.prune(NAMESPACE, T0 + timedelta(minutes=6), KEY, T0 + timedelta(days=1))
    assert prune is not None and prune.kind == "prune"
    assert (prune.body["throughSeq"], prune.body["deleted"]) == (10, 10)
    assert store.first_seq(NAMESPACE) == 11
    assert [run.name for run in store.history(HistoryQuery(NAMESPACE)).runs][-1] == "deploy-prod-6"
    assert store.logs(NAMESPACE, "uid-3") == []
    result = store.verify(NAMESPACE, KEY.public_key())
    assert result.ok and result.first_seq == 11
    assert verify_export(list(store.export(NAMESPACE)), KEY.public_key()).ok
    assert store.prune(NAMESPACE, T0 + timedelta(minutes=6), KEY, T0 + timedelta(days=1)) is None, "nothing left"


def test_retention_never_prunes_past_the_last_checkpoint(store: ArchiveStore) -> None:
    for number in range(1, 5):
        archive_run(store, number)
    assert store.prune(NAMESPACE, T0 + timedelta(days=1), KEY, T0 + timedelta(days=2)) is None, "nothing signed"
    store.sign_head(NAMESPACE, KEY, T0)
    archive_run(store, 5)
    prune = store.prune(NAMESPACE, T0 + timedelta(days=1), KEY, T0 + timedelta(days=2))
    assert prune is not None and prune.body["throughSeq"] == 4
    assert [entry.key for entry in store.entries(NAMESPACE)] == ["uid-5", "4"]


def test_retention_refuses_to_prune_away_a_tampered_record(store: ArchiveStore, archive_url: str) -> None:
    for number in range(1, 5):
        archive_run(store, number)
    store.sign_head(NAMESPACE, KEY, T0)
    run_sql(archive_url, "UPDATE entries SET body = replace(body, 'carol', 'mallory') WHERE seq = 2")
    with pytest.raises(ArchiveError, match=r"refused: seq 2 \(run uid-2\) was changed"):
        store.prune(NAMESPACE, T0 + timedelta(days=1), KEY, T0 + timedelta(days=2))
    assert store.first_seq(NAMESPACE) == 1, "nothing was deleted"


def test_an_export_since_a_time_starts_at_a_checkpoint_so_it_verifies_on_its_own(store: ArchiveStore) -> None:
    for number in range(1, 4):
        archive_run(store, number)
    store.sign_head(NAMESPACE, KEY, T0)
    for number in range(4, 7):
        archive_run(store, number)
    store.sign_head(NAMESPACE, KEY, T0)
    lines = list(store.export(NAMESPACE, since=T0 + timedelta(minutes=5)))
    keys = [line for line in lines if '"type":"entry"' in line]
    assert len(keys) == 3, "from the record after the checkpoint at seq 3"
    result = verify_export(lines, KEY.public_key())
    assert result.ok and (result.first_seq, result.head_seq, result.unsigned) == (4, 6, 0)
