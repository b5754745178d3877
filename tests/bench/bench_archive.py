"""The archive's store: append throughput, database bytes per run and per step, and the history query over many runs.

    TOWLINE_BENCH_ARCHIVE_RUNS=1000000 python -m tests.bench.bench_archive

Each run is archived as the component archives it: its document (STEPS steps with attempts, outputs and
image digests), one log record per step (LOG_BYTES of text) and, every tenth run, an approval; through
`ArchiveStore.append`, which chains and indexes each record in its own transaction. That is what the
throughput and the bytes measure. Past TOWLINE_BENCH_ARCHIVE_APPENDS runs (default 20,000) the rest of the
runs are written by one SQL statement with the same row shapes (PostgreSQL only): appending a million runs one
transaction at a time would take most of an hour and measures nothing the first 20,000 did not; the query
only needs the rows. The query is the history page a person asks for: one workflow (of WORKFLOWS) in one
quarter, newest first, 50 runs.

Backend: a PostgreSQL server of its own (Debian's, fsync on, as in production) unless
TOWLINE_BENCH_ARCHIVE_URL names a database (`sqlite:///path` for SQLite).
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline.archive import ApprovalIndex, ArchiveStore, HistoryQuery, LogIndex, RunIndex, open_store
from towline.archive.sqlstore import SqlArchiveStore

STEPS = 5
LOG_BYTES = 1024
WORKFLOWS = 50
NAMESPACE = "bench"
YEAR_START = datetime(2025, 1, 1, tzinfo=UTC)
TABLES = ("entries", "runs", "run_labels", "approvers", "approvals", "logs", "checkpoints", "chain_heads")


def run_document(number: int, workflow: str, started: datetime) -> dict[str, object]:
    steps = [{"id": f"step_{index}", "phase": "Succeeded",
              "attempts": [{"attempt": 1, "job": f"towline-step-{workflow}-{number}-{index}-1",
                            "startedAt": started.isoformat(),
                            "finishedAt": (started + timedelta(seconds=5)).isoformat(),
                            "imageID": "localhost/towline-runner@sha256:" + "ab" * 32,
                            "inputs": {"url": "https://api.example.com/v1/items", "method": "POST"},
                            "output": {"status": 200, "id": f"item-{number}-{index}"}}]}
             for index in range(STEPS)]
    return {"metadata": {"name": f"{workflow}-{number}", "uid": f"uid-{number}", "labels": {"team": "payments"}},
            "spec": {"workflowRef": {"name": workflow}, "requestedBy": "carol", "params": {"service": "checkout"},
                     "trigger": {"type": "webhook", "deliveryId": f"msg_{number}"}},
            "status": {"phase": "Succeeded", "workflow": {"uid": "wf-uid", "generation": 3}, "steps": steps}}


def append_run(store: ArchiveStore, number: int, total: int) -> int:
    """Archive run `number` with its logs (and an approval every tenth run); how many records that made."""
    workflow = f"wf-{number % WORKFLOWS}"
    started = YEAR_START + timedelta(seconds=number * (365 * 86400 / total))
    name = f"{workflow}-{number}"
    records = 0
    for index in range(STEPS):
        text = (f"step {index} of {name}: " + "x" * LOG_BYTES)[:LOG_BYTES]
        body = {"text": text, "bytes": LOG_BYTES, "truncated": False}
        store.append(NAMESPACE, "log", f"pod-{number}-{index}/step", body,
                     index=LogIndex(f"uid-{number}", name, f"step_{index}", 1, f"pod-{number}-{index}", "step"),
                     recorded_at=started + timedelta(seconds=5))
        records += 1
    approvers: tuple[str, ...] = ()
    if number % 10 == 0:
        store.append(NAMESPACE, "approval", f"approval-{number}", {"decision": "Approved", "decidedBy": "bob"},
                     index=ApprovalIndex(f"uid-{number}", name, "review", "bob", "Approved"),
                     recorded_at=started + timedelta(seconds=6))
        approvers, records = ("bob",), records + 1
    store.append(NAMESPACE, "run", f"uid-{number}", run_document(number, workflow, started),
                 index=RunIndex(name, workflow, "Succeeded", "carol", started, started + timedelta(seconds=30),
                                {"team": "payments"}, approvers),
                 recorded_at=started + timedelta(seconds=31))
    return records + 1


def database_bytes(store: SqlArchiveStore, url: str) -> int:
    if store.database.dialect == "postgresql":
        total = 0
        for table in TABLES:
            (row,) = store.database.execute(f"SELECT pg_total_relation_size('{table}')")
            total += int(str(row[0]))
        return total
    path = url[len("sqlite:///"):]
    store.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return os.path.getsize(path)


def bulk_fill(store: SqlArchiveStore, first: int, total: int) -> None:
    """Runs first..total-1 as rows of the same shape, by one statement per table (PostgreSQL)."""
    sample = store.database.execute("SELECT body FROM entries WHERE namespace = ? AND kind = 'run' LIMIT 1",
                                    [NAMESPACE])[0][0]
    start_us = int(YEAR_START.timestamp() * 1_000_000)
    step_us = 365 * 86400 * 1_000_000 // total
    base = store.head(NAMESPACE)[0] + 1 - first
    execute = store.database.execute
    execute("INSERT INTO entries (namespace, seq, kind, key, recorded_at, recorded_us, body, prev_digest, digest) "
            "SELECT ?, ? + n, 'run', 'uid-' || n, '2025-01-01T00:00:00.000000Z', ? + n * ?, "
            "replace(?, 'uid-0', 'uid-' || n), md5(n::text) || md5(n::text), md5(n::text) || md5((n+1)::text) "
            f"FROM generate_series({first}::bigint, {total - 1}::bigint) AS n",
            [NAMESPACE, base, start_us, step_us, str(sample)])
    execute("INSERT INTO runs (namespace, uid, seq, name, workflow, phase, requester, started_us, finished_us) "
            "SELECT ?, 'uid-' || n, ? + n, 'wf-' || mod(n, ?) || '-' || n, 'wf-' || mod(n, ?), 'Succeeded', 'carol', "
            f"? + n * ?, ? + n * ? + 30000000 FROM generate_series({first}::bigint, {total - 1}::bigint) AS n",
            [NAMESPACE, base, WORKFLOWS, WORKFLOWS, start_us, step_us, start_us, step_us])
    execute("ANALYZE")


def main() -> None:
    total = int(os.environ.get("TOWLINE_BENCH_ARCHIVE_RUNS", "2000"))
    appended_runs = min(total, int(os.environ.get("TOWLINE_BENCH_ARCHIVE_APPENDS", "20000")))
    with ExitStack() as stack:
        url = os.environ.get("TOWLINE_BENCH_ARCHIVE_URL")
        if not url:
            from towline_dev.postgres import running_postgres  # noqa: PLC0415 - only when no database is given

            server = stack.enter_context(running_postgres(lambda message: None, durable=True))
            url = server.create_database("bench")
        store = open_store(url, now=datetime.now(UTC))
        assert isinstance(store, SqlArchiveStore)
        stack.callback(store.close)
        empty = database_bytes(store, url)
        records, started = 0, time.perf_counter()
        for number in range(appended_runs):
            records += append_run(store, number, total)
            if number % 1000 == 999:
                store.sign_head(NAMESPACE, Ed25519PrivateKey.generate(), datetime.now(UTC))
        elapsed = time.perf_counter() - started
        used = database_bytes(store, url) - empty
        print(f"archive ({store.database.dialect}): {appended_runs:,} runs appended ({records:,} records: "
              f"the run, {STEPS} step logs of {LOG_BYTES} B, an approval every tenth run) in {elapsed:.1f} s")
        print(f"  {appended_runs / elapsed:,.0f} runs/s, {records / elapsed:,.0f} records/s, "
              f"{elapsed / records * 1000:.2f} ms per record")
        print(f"  database bytes: {used / appended_runs:,.0f} per run, {used / (appended_runs * STEPS):,.0f} per step "
              f"(tables and indexes, logs included)")
        if total > appended_runs:
            if store.database.dialect != "postgresql":
                raise SystemExit("past TOWLINE_BENCH_ARCHIVE_APPENDS runs, the bulk fill needs PostgreSQL")
            filled = time.perf_counter()
            bulk_fill(store, appended_runs, total)
            print(f"  runs {appended_runs:,}..{total - 1:,} written by one statement per table "
                  f"({time.perf_counter() - filled:.0f} s); {total:,} runs in all")
        query = HistoryQuery(NAMESPACE, workflow="wf-7", started_from=datetime(2025, 7, 1, tzinfo=UTC),
                             started_before=datetime(2025, 10, 1, tzinfo=UTC), limit=50)
        store.history(query)
        timings = []
        for _ in range(20):
            began = time.perf_counter()
            page = store.history(query)
            timings.append((time.perf_counter() - began) * 1000)
        print(f"  history (workflow wf-7, Q3 2025, newest 50 of {total:,} runs): "
              f"median {statistics.median(timings):.1f} ms, worst {max(timings):.1f} ms of 20; "
              f"{len(page.runs)} runs, next page: {page.continue_token is not None}")


if __name__ == "__main__":
    main()
