"""`ArchiveStore` over a `Database`: appends that chain and index in one transaction, and the reads.

An append locks its namespace's head row, so seq, prev digest and digest are assigned with no gap and no
fork even with several writers; the (namespace, kind, key) uniqueness makes a repeated append a no-op.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from towline.archive import queries
from towline.archive.chain import Checkpoint, canonical, record_digest, sign_checkpoint
from towline.archive.db import Database, Param, Row, batches
from towline.archive.migrations import schema_version
from towline.archive.records import (
    GENESIS_DIGEST,
    Appended,
    ApprovalIndex,
    ArchivedRun,
    ArchiveError,
    Entry,
    HistoryPage,
    HistoryQuery,
    Index,
    JSONObject,
    LogIndex,
    RunIndex,
    check_body,
    format_time,
    micros,
)
from towline.archive.verification import VerifyResult, verify

ENTRY_COLUMNS = "seq, namespace, kind, key, recorded_at, body, prev_digest, digest"
CHECKPOINT_COLUMNS = "namespace, seq, head_digest, signed_at, key_id, signature"
_INDEX_FOR_KIND: dict[str, type] = {"run": RunIndex, "approval": ApprovalIndex, "log": LogIndex}


def entry_from_row(row: Row) -> Entry:
    seq, namespace, kind, key, recorded_at, body, prev_digest, digest = row
    return Entry(namespace=str(namespace), seq=int(str(seq)), kind=str(kind), key=str(key),
                 recorded_at=str(recorded_at), body=json.loads(str(body)), prev_digest=str(prev_digest),
                 digest=str(digest))


def checkpoint_from_row(row: Row) -> Checkpoint:
    namespace, seq, head_digest, signed_at, key_id, signature = row
    return Checkpoint(namespace=str(namespace), seq=int(str(seq)), head_digest=str(head_digest),
                      signed_at=str(signed_at), key_id=str(key_id), signature=str(signature))


class SqlArchiveStore:
    """The one `ArchiveStore`, for both dialects (see `towline.archive.db`)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def append(
        self, namespace: str, kind: str, key: str, body: JSONObject, *, index: Index | None, recorded_at: datetime,
    ) -> Appended:
        if kind == "prune":
            raise ArchiveError("prune records are written by prune(), which signs their anchor")
        _check_index(kind, index)
        with self.database.transaction(write=True):
            return self.append_locked(namespace, kind, key, body, index=index, recorded_at=recorded_at)

    def append_locked(
        self, namespace: str, kind: str, key: str, body: JSONObject, *, index: Index | None, recorded_at: datetime,
    ) -> Appended:
        """`append` inside a write transaction the caller holds (retention appends its prune record so)."""
        if not namespace or not key:
            raise ArchiveError(f"a {kind} record needs a namespace and a key (got {namespace!r}, {key!r})")
        body_text = canonical(check_body(kind, body)).decode()
        recorded = format_time(recorded_at)
        seq, prev = self.lock_head(namespace)
        existing = self.database.execute(
            f"SELECT {ENTRY_COLUMNS} FROM entries WHERE namespace = ? AND kind = ? AND key = ?",
            [namespace, kind, key])
        if existing:
            return Appended(entry_from_row(existing[0]), created=False)
        seq += 1
        digest = record_digest(prev, namespace=namespace, seq=seq, kind=kind, key=key, recorded_at=recorded,
                               body=body)
        self.database.execute(
            f"INSERT INTO entries ({ENTRY_COLUMNS}, recorded_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [seq, namespace, kind, key, recorded, body_text, prev, digest, micros(recorded_at)])
        if index is not None:
            self._index(namespace, seq, key, index)
        self.database.execute("UPDATE chain_heads SET seq = ?, digest = ? WHERE namespace = ?",
                              [seq, digest, namespace])
        entry = Entry(namespace=namespace, seq=seq, kind=kind, key=key, recorded_at=recorded, body=body,
                      prev_digest=prev, digest=digest)
        return Appended(entry, created=True)

    def lock_head(self, namespace: str) -> tuple[int, str]:
        """The head of `namespace`'s chain, locked until the transaction ends (created at genesis if new)."""
        select = f"SELECT seq, digest FROM chain_heads WHERE namespace = ?{self.database.lock_clause}"
        rows = self.database.execute(select, [namespace])
        if not rows:
            self.database.execute("INSERT INTO chain_heads (namespace, seq, digest) VALUES (?, 0, ?) "
                                  "ON CONFLICT (namespace) DO NOTHING", [namespace, GENESIS_DIGEST])
            rows = self.database.execute(select, [namespace])
        return int(str(rows[0][0])), str(rows[0][1])

    def _index(self, namespace: str, seq: int, key: str, index: Index) -> None:
        execute = self.database.execute
        if isinstance(index, RunIndex):
            finished = micros(index.finished_at) if index.finished_at is not None else None
            execute("INSERT INTO runs (namespace, uid, seq, name, workflow, phase, requester, started_us, finished_us) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [namespace, key, seq, index.name, index.workflow, index.phase, index.requester,
                     micros(index.started_at), finished])
            if index.labels:
                self.database.executemany(
                    "INSERT INTO run_labels (namespace, uid, name, value) VALUES (?, ?, ?, ?)",
                    [[namespace, key, name, value] for name, value in sorted(index.labels.items())])
            self._approvers(namespace, key, index.approvers)
        elif isinstance(index, ApprovalIndex):
            execute("INSERT INTO approvals (namespace, uid, seq, run_uid, run_name, step, decided_by, decision) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [namespace, key, seq, index.run_uid, index.run_name, index.step, index.decided_by,
                     index.decision])
            self._approvers(namespace, index.run_uid, (index.decided_by,) if index.decided_by else ())
        else:
            execute("INSERT INTO logs (namespace, seq, run_uid, run_name, step, attempt, pod_uid, container) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [namespace, seq, index.run_uid, index.run_name, index.step, index.attempt, index.pod_uid,
                     index.container])

    def _approvers(self, namespace: str, run_uid: str, approvers: tuple[str, ...]) -> None:
        if approvers:
            self.database.executemany(
                "INSERT INTO approvers (namespace, run_uid, approver) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                [[namespace, run_uid, approver] for approver in sorted(set(approvers))])

    def head(self, namespace: str) -> tuple[int, str]:
        rows = self.database.execute("SELECT seq, digest FROM chain_heads WHERE namespace = ?", [namespace])
        return (int(str(rows[0][0])), str(rows[0][1])) if rows else (0, GENESIS_DIGEST)

    def namespaces(self) -> list[str]:
        return [str(row[0]) for row in self.database.execute("SELECT namespace FROM chain_heads ORDER BY namespace")]

    def sign_head(self, namespace: str, private_key: Ed25519PrivateKey, signed_at: datetime) -> Checkpoint | None:
        seq, digest = self.head(namespace)
        latest = self.latest_checkpoint(namespace)
        if seq == 0 or (latest is not None and latest.seq >= seq):
            return None
        checkpoint = sign_checkpoint(private_key, namespace, seq, digest, format_time(signed_at))
        self.add_checkpoint(checkpoint)
        return checkpoint

    def add_checkpoint(self, checkpoint: Checkpoint) -> None:
        self.database.execute(
            f"INSERT INTO checkpoints ({CHECKPOINT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [checkpoint.namespace, checkpoint.seq, checkpoint.head_digest, checkpoint.signed_at, checkpoint.key_id,
             checkpoint.signature])

    def latest_checkpoint(self, namespace: str) -> Checkpoint | None:
        rows = self.database.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = ? "
                                     "ORDER BY seq DESC LIMIT 1", [namespace])
        return checkpoint_from_row(rows[0]) if rows else None

    def checkpoints(self, namespace: str, since_seq: int = 0) -> list[Checkpoint]:
        rows = self.database.execute(f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = ? "
                                     "AND seq >= ? ORDER BY seq", [namespace, since_seq])
        return [checkpoint_from_row(row) for row in rows]

    def first_seq(self, namespace: str) -> int:
        rows = self.database.execute("SELECT MIN(seq) FROM entries WHERE namespace = ?", [namespace])
        return int(str(rows[0][0])) if rows[0][0] is not None else self.head(namespace)[0] + 1

    def entries(self, namespace: str, since_seq: int = 0) -> Iterator[Entry]:
        sql = f"SELECT {ENTRY_COLUMNS} FROM entries WHERE namespace = ? AND seq > ? ORDER BY seq LIMIT ?"
        for row in batches(self.database, sql, [namespace], after=since_seq - 1):
            yield entry_from_row(row)

    def verify(self, namespace: str, public_key: Ed25519PublicKey, since: Checkpoint | None = None) -> VerifyResult:
        first = self.first_seq(namespace)
        if since is not None and since.seq + 1 >= first:
            # The checkpoint must still be the one the earlier pass verified: verify() anchors on it by seq.
            return verify(namespace, self.entries(namespace, since.seq + 1),
                          self.checkpoints(namespace, since.seq), public_key, first_seq=since.seq + 1,
                          anchor=since)
        return verify(namespace, self.entries(namespace, first), self.checkpoints(namespace), public_key,
                      first_seq=first)

    def history(self, query: HistoryQuery) -> HistoryPage:
        sql, params = queries.history_sql(query, entry_columns=ENTRY_COLUMNS)
        rows = self.database.execute(sql, params)
        runs = [queries.archived_run(row[:7], entry_from_row(row[7:])) for row in rows[:query.limit]]
        token = queries.continue_token(runs[-1]) if len(rows) > query.limit else None
        return HistoryPage(runs=runs, continue_token=token)

    def run(self, namespace: str, name_or_uid: str) -> ArchivedRun | None:
        for sql in (queries.RUN_BY_UID, queries.RUN_BY_NAME):
            rows = self.database.execute(sql.format(entry_columns=_prefixed(ENTRY_COLUMNS)),
                                         [namespace, name_or_uid])
            if rows:
                return queries.archived_run(rows[0][:7], entry_from_row(rows[0][7:]))
        return None

    def _run_uid(self, namespace: str, run: str) -> str:
        """The UID `run` names: a UID of an archived run, else the newest run archived or logged by that name."""
        archived = self.run(namespace, run)
        if archived is not None:
            return archived.uid
        rows = self.database.execute("SELECT run_uid FROM logs WHERE namespace = ? AND run_name = ? "
                                     "ORDER BY seq DESC LIMIT 1", [namespace, run])
        rows = rows or self.database.execute("SELECT run_uid FROM approvals WHERE namespace = ? AND run_name = ? "
                                             "ORDER BY seq DESC LIMIT 1", [namespace, run])
        return str(rows[0][0]) if rows else run

    def approvals(self, namespace: str, run: str) -> list[Entry]:
        rows = self.database.execute(
            f"SELECT {_prefixed(ENTRY_COLUMNS)} FROM approvals a JOIN entries e "
            "ON e.namespace = a.namespace AND e.seq = a.seq WHERE a.namespace = ? AND a.run_uid = ? ORDER BY e.seq",
            [namespace, self._run_uid(namespace, run)])
        return [entry_from_row(row) for row in rows]

    def logs(self, namespace: str, run: str, step: str | None = None) -> list[Entry]:
        params: list[Param] = [namespace, self._run_uid(namespace, run)]
        where = "l.namespace = ? AND l.run_uid = ?"
        if step is not None:
            where += " AND l.step = ?"
            params.append(step)
        rows = self.database.execute(
            f"SELECT {_prefixed(ENTRY_COLUMNS)} FROM logs l JOIN entries e ON e.namespace = l.namespace "
            f"AND e.seq = l.seq WHERE {where} ORDER BY l.step, l.attempt, l.container, e.seq", params)
        return [entry_from_row(row) for row in rows]

    def prune(
        self, namespace: str, before: datetime, private_key: Ed25519PrivateKey, now: datetime,
    ) -> Entry | None:
        from towline.archive.retention import prune  # noqa: PLC0415 - retention builds on this class

        return prune(self, namespace, before, private_key, now)

    def export(self, namespace: str, since: datetime | None = None) -> Iterator[str]:
        from towline.archive.exports import export  # noqa: PLC0415 - exports builds on this class

        return export(self, namespace, since)

    def schema_version(self) -> int:
        return schema_version(self.database)

    def close(self) -> None:
        self.database.close()


def _check_index(kind: str, index: Index | None) -> None:
    wanted = _INDEX_FOR_KIND.get(kind)
    if wanted is None:
        raise ArchiveError(f"kind {kind!r} is not one of run, approval, log")
    if not isinstance(index, wanted):
        raise ArchiveError(f"a {kind} record needs index={wanted.__name__}(...) (got {type(index).__name__})")


def _prefixed(columns: str) -> str:
    return ", ".join(f"e.{column.strip()}" for column in columns.split(","))
