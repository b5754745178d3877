"""PostgreSQL, for production: psycopg 3, one connection, reconnected when it breaks.

The URL is a libpq connection URI (`postgresql://user:password@host:5432/db?sslmode=verify-full`); errors
name the host and database, never the password.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg

from towline.archive.db import Param, Row
from towline.archive.records import ArchiveError

CONNECT_TIMEOUT_SECONDS = 10


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


class PostgresDatabase:
    dialect = "postgresql"
    lock_clause = " FOR UPDATE"

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.RLock()
        self._connection = self._connect()

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        try:
            return psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
        except psycopg.Error as error:
            raise ArchiveError(f"cannot reach the archive database {redact_url(self._url)}: "
                               f"{str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__}"
                               ) from error

    def _ready(self) -> psycopg.Connection[tuple[object, ...]]:
        # A server restart breaks the connection; the next call gets a new one instead of failing forever.
        if self._connection.broken or self._connection.closed:
            self._connection = self._connect()
        return self._connection

    def execute(self, sql: str, params: Sequence[Param] = ()) -> list[Row]:
        with self._lock:
            cursor = self._ready().execute(_placeholders(sql), params)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description is not None else []

    def executemany(self, sql: str, rows: Sequence[Sequence[Param]]) -> None:
        with self._lock, self._ready().cursor() as cursor:
            cursor.executemany(_placeholders(sql), rows)

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[None]:
        del write  # PostgreSQL locks rows as statements reach them (the chain head: SELECT ... FOR UPDATE)
        with self._lock, self._ready().transaction():
            yield

    def close(self) -> None:
        with self._lock:
            self._connection.close()


def _placeholders(sql: str) -> str:
    # The store's statements use `?` and hold no literal `?` or `%`.
    return sql.replace("?", "%s")
