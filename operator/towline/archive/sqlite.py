"""SQLite, the embedded default: one file on a volume, one writer (the archive's single replica).

WAL journal (readers never wait for the writer) with `synchronous=FULL` (a committed record survives a
power cut: it is the record), and a busy timeout so a reader that holds the file briefly never fails a
write.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from towline.archive.db import Param, Row
from towline.archive.records import ArchiveError

BUSY_TIMEOUT_MS = 30_000


class SQLiteDatabase:
    dialect = "sqlite"
    lock_clause = ""

    def __init__(self, path: Path) -> None:
        if not path.parent.is_dir():
            raise ArchiveError(f"archive database {path}: the directory {path.parent} does not exist; "
                               "mount the archive's volume there or give another sqlite:/// path")
        try:
            # isolation_level=None: this class begins and ends transactions itself.
            self._connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as error:
            raise ArchiveError(f"archive database {path}: {error}") from error
        self._lock = threading.RLock()
        self.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self.execute("PRAGMA journal_mode = WAL")
        self.execute("PRAGMA synchronous = FULL")

    def execute(self, sql: str, params: Sequence[Param] = ()) -> list[Row]:
        with self._lock:
            return [tuple(row) for row in self._connection.execute(sql, params).fetchall()]

    def executemany(self, sql: str, rows: Sequence[Sequence[Param]]) -> None:
        with self._lock:
            self._connection.executemany(sql, rows)

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[None]:
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._connection.close()
