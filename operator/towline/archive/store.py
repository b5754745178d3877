"""The archive store: what the archive component writes to and the readers read from, and how to open one.

`open_store("sqlite:///var/lib/towline/archive.db")` or `open_store("postgresql://user:pw@host/db")`
applies the schema's migrations and returns an `ArchiveStore`. Every record is appended to its
namespace's hash chain in the same transaction that indexes it; nothing here reads a clock (times are
arguments) or talks to Kubernetes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from towline.archive.chain import Checkpoint
from towline.archive.db import Database
from towline.archive.migrations import migrate
from towline.archive.records import (
    Appended,
    ArchivedRun,
    ArchiveError,
    Entry,
    HistoryPage,
    HistoryQuery,
    Index,
    JSONObject,
    format_time,
)
from towline.archive.verification import VerifyResult


class ArchiveStore(Protocol):
    """The archive's storage. Safe for one writer per namespace at a time across processes (the chain head
    is locked per append); a store object may be shared by threads (it serializes its calls)."""

    def append(
        self, namespace: str, kind: str, key: str, body: JSONObject, *, index: Index | None, recorded_at: datetime,
    ) -> Appended:
        """Append a `run`, `approval` or `log` record (with its RunIndex/ApprovalIndex/LogIndex). A second
        append of the same (namespace, kind, key) changes nothing and returns the first (created=False)."""
        ...

    def head(self, namespace: str) -> tuple[int, str]:
        """(seq, digest) of the namespace's newest record; (0, GENESIS_DIGEST) before the first."""
        ...

    def namespaces(self) -> list[str]: ...

    def sign_head(self, namespace: str, private_key: Ed25519PrivateKey, signed_at: datetime) -> Checkpoint | None:
        """Sign and keep a checkpoint of the head, unless the latest checkpoint already covers it (None)."""
        ...

    def add_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Keep a checkpoint signed elsewhere (a second one for the same seq is ignored)."""
        ...

    def latest_checkpoint(self, namespace: str) -> Checkpoint | None: ...

    def checkpoints(self, namespace: str, since_seq: int = 0) -> list[Checkpoint]:
        """Checkpoints with seq >= since_seq, oldest first."""
        ...

    def first_seq(self, namespace: str) -> int:
        """The oldest retained record's seq (1 until a prune; the head's seq + 1 for an empty chain)."""
        ...

    def entries(self, namespace: str, since_seq: int = 0) -> Iterator[Entry]:
        """Records with seq >= since_seq in seq order, streamed in batches."""
        ...

    def verify(self, namespace: str, public_key: Ed25519PublicKey, since: Checkpoint | None = None) -> VerifyResult:
        """The live chain and its checkpoints, verified as an auditor would verify an export; with `since` (a
        checkpoint an earlier pass verified), only the records after it, anchored on it."""
        ...

    def history(self, query: HistoryQuery) -> HistoryPage:
        """Archived runs matching every filter given, newest first, one page at a time."""
        ...

    def run(self, namespace: str, name_or_uid: str) -> ArchivedRun | None:
        """An archived run by UID, else the newest archived run of that name."""
        ...

    def approvals(self, namespace: str, run: str) -> list[Entry]:
        """A run's archived approval records (run by name or UID), oldest first."""
        ...

    def logs(self, namespace: str, run: str, step: str | None = None) -> list[Entry]:
        """A run's archived log records (run by name or UID), of one step or all, by attempt."""
        ...

    def prune(
        self, namespace: str, before: datetime, private_key: Ed25519PrivateKey, now: datetime,
    ) -> Entry | None:
        """Retention: delete the records recorded before `before` (only as far as a checkpoint covers, and
        only after they verify), keep a signed anchor, and append the `prune` record saying so. None when
        nothing was old enough."""
        ...

    def export(self, namespace: str, since: datetime | None = None) -> Iterator[str]:
        """The namespace's chain as JSON lines (a header, the checkpoints, the records), each ending in a
        newline; from the last checkpoint before `since`, so the export verifies on its own."""
        ...

    def schema_version(self) -> int: ...

    def close(self) -> None: ...


def open_store(url: str, *, now: datetime) -> ArchiveStore:
    """Open (creating and migrating as needed) the archive at `url`; `now` is recorded with each migration.

    `sqlite:///relative/path.db`, `sqlite:////absolute/path.db`, or a libpq URI `postgresql://...`
    (`postgres://` too)."""
    from towline.archive.sqlstore import SqlArchiveStore  # noqa: PLC0415 - it imports this module's protocol

    database = open_database(url)
    try:
        migrate(database, applied_at=format_time(now))
    except BaseException:
        database.close()
        raise
    return SqlArchiveStore(database)


def open_database(url: str) -> Database:
    """The database a URL names, connected, without migrating it."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        if not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
            raise ArchiveError(f"archive.database.url {url!r}: write sqlite:///relative.db or "
                               "sqlite:////absolute/path/archive.db")
        from towline.archive.sqlite import SQLiteDatabase  # noqa: PLC0415 - only the dialect in use is loaded

        return SQLiteDatabase(Path(url[len("sqlite:///"):]))
    if scheme in ("postgresql", "postgres"):
        from towline.archive.postgres import PostgresDatabase  # noqa: PLC0415 - psycopg loads only when used

        return PostgresDatabase(url)
    raise ArchiveError(f"archive.database.url: the scheme {scheme!r} is not one the archive stores to; "
                       "use sqlite:///path or postgresql://user:password@host:5432/database")
