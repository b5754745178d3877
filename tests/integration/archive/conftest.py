"""The archive store's backends: SQLite in a file and a real PostgreSQL server (Debian's, started once per session).

`archive_url` is parametrized: every test that takes it runs once on each backend, against a database of its
own (a new file, or a new PostgreSQL database), so the same tests hold for both."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from towline_dev.postgres import PostgresServer, running_postgres

_DATABASES = itertools.count(1)


def _progress(message: str) -> None:
    print(f"[towline tests] {message}", file=sys.__stderr__, flush=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session (installed at its pin first if missing)."""
    with running_postgres(_progress) as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def archive_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.fixture
def archive_url(archive_backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database's URL on this backend."""
    if archive_backend == "sqlite":
        return f"sqlite:///{tmp_path / 'archive.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database(f"archive_{next(_DATABASES)}")
