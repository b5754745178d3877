"""The little the store needs from a SQL database, so one store serves SQLite and PostgreSQL alike.

Statements are written once, with `?` placeholders and SQL both dialects accept (ON CONFLICT DO NOTHING,
row-value comparisons); a dialect supplies the connection, its placeholder style, how a writer takes the
per-namespace lock (`FOR UPDATE` on PostgreSQL; SQLite's `BEGIN IMMEDIATE` already excludes other writers)
and how a transaction begins. A `Database` is used from one thread at a time; the store holds a lock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

Param = str | int | float | bytes | None
Row = tuple[object, ...]


class Database(Protocol):
    dialect: str
    """"sqlite" or "postgresql": which migrations apply."""
    lock_clause: str
    """Appended to the SELECT of a chain head inside a write transaction."""

    def execute(self, sql: str, params: Sequence[Param] = ()) -> list[Row]:
        """Run one statement; the rows it returns (none for DDL and writes)."""
        ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Param]]) -> None: ...

    def transaction(self, *, write: bool) -> AbstractContextManager[None]:
        """Commit on success, roll back on an exception. A write transaction on SQLite takes the database's
        write lock at once, so two writers queue instead of failing halfway."""
        ...

    def close(self) -> None: ...


def batches(
    database: Database, sql: str, params: Sequence[Param], *, after: int, size: int = 1000,
) -> Iterator[Row]:
    """Stream a query ordered by seq in keyset batches (`sql` ends with `seq > ? ORDER BY seq LIMIT ?`): a
    million rows never sit in memory, and no transaction or server-side cursor stays open between batches."""
    last = after
    while True:
        rows = database.execute(sql, [*params, last, size])
        yield from rows
        if len(rows) < size:
            return
        last = int(str(rows[-1][0]))
