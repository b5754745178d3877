"""Opening an archive: a URL it cannot use is refused with the fix, and a password never reaches a message."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from towline.archive import ArchiveError, open_store
from towline.archive.postgres import redact_url
from towline.archive.queries import parse_continue_token

NOW = datetime(2025, 7, 1, tzinfo=UTC)


@pytest.mark.parametrize(("url", "message"), [
    ("mysql://db/archive", "use sqlite:///path or postgresql://"),
    ("sqlite:///", "sqlite:////absolute/path"),
    ("sqlite://relative.db", "sqlite:////absolute/path"),
    ("sqlite:////no/such/directory/archive.db", "the directory /no/such/directory does not exist"),
])
def test_an_archive_url_it_cannot_use_is_refused_naming_the_fix(url: str, message: str) -> None:
    with pytest.raises(ArchiveError, match=message):
        open_store(url, now=NOW)


def test_an_unreachable_postgresql_server_is_named_without_its_password() -> None:
    with pytest.raises(ArchiveError, match=r"cannot reach the archive database") as raised:
        open_store("postgresql://archive:s3cret-pw@127.0.0.1:1/towline?connect_timeout=2", now=NOW)
    assert "s3cret-pw" not in str(raised.value) and "archive:***@127.0.0.1:1" in str(raised.value)
    assert redact_url("postgresql://u:p%40ss@h/db") == "postgresql://u:***@h/db"


def test_a_new_sqlite_archive_is_created_and_migrated(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'archive.db'}", now=NOW)
    assert store.schema_version() == 1 and store.namespaces() == []
    store.close()


@pytest.mark.parametrize("token", ["", "not base64!", "eyJ2IjoxfQ", "eyJ2IjoyLCJzIjoxLCJxIjoxfQ", "WzFd"])
def test_a_continue_token_the_archive_did_not_give_is_refused(token: str) -> None:
    with pytest.raises(ArchiveError, match="ask again without it"):
        parse_continue_token(token)
