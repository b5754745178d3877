"""Schema migrations, versioned from the first one: applied to an empty database and recorded, applied once,
a later migration applied to a database holding the previous version's data, and a newer database refused."""

from __future__ import annotations

import pytest
from archive_support import KEY, NAMESPACE, T0, archive_run, run_sql

from towline.archive import LATEST_VERSION, ArchiveError, open_store
from towline.archive.migrations import MIGRATIONS, Migration, migrate, schema_version
from towline.archive.store import open_database

pytestmark = pytest.mark.integration


def test_migrations_apply_to_an_empty_database_and_record_the_schema_version(archive_url: str) -> None:
    database = open_database(archive_url)
    assert migrate(database, applied_at="2025-07-01T08:00:00.000000Z") == [m.version for m in MIGRATIONS]
    assert schema_version(database) == LATEST_VERSION == 1
    assert database.execute("SELECT version, description, applied_at FROM schema_migrations") == \
        [(1, MIGRATIONS[0].description, "2025-07-01T08:00:00.000000Z")]
    assert migrate(database, applied_at="2025-07-02T08:00:00.000000Z") == [], "applied once"
    database.close()


def test_opening_a_store_again_keeps_its_records_and_applies_nothing(archive_url: str) -> None:
    store = open_store(archive_url, now=T0)
    archive_run(store, 1)
    store.close()
    reopened = open_store(archive_url, now=T0)
    assert reopened.schema_version() == LATEST_VERSION and reopened.verify(NAMESPACE, KEY.public_key()).records == 1
    reopened.close()


def test_a_later_migration_applies_to_a_database_holding_the_previous_versions_data(archive_url: str) -> None:
    store = open_store(archive_url, now=T0)
    archive_run(store, 1)
    store.close()
    second = Migration(2, "an index added by a later release",
                       ("CREATE INDEX runs_by_phase ON runs (namespace, phase)",))
    database = open_database(archive_url)
    assert migrate(database, applied_at="2025-08-01T08:00:00.000000Z", migrations=(*MIGRATIONS, second)) == [2]
    assert schema_version(database) == 2
    database.close()
    with pytest.raises(ArchiveError, match="schema version 2, newer than this archive knows"):
        open_store(archive_url, now=T0)


def test_a_failing_migration_leaves_the_database_as_it_was(archive_url: str) -> None:
    database = open_database(archive_url)
    broken = Migration(1, "half a schema", ("CREATE TABLE half (x INTEGER)", "CREATE TABLE half (x INTEGER)"))
    with pytest.raises(Exception, match=r"(?i)already exists"):
        migrate(database, applied_at="2025-07-01T08:00:00.000000Z", migrations=(broken,))
    database.close()
    run_sql(archive_url, "CREATE TABLE half (x INTEGER)")  # its first statement was rolled back too
    store = open_store(archive_url, now=T0)
    assert store.schema_version() == LATEST_VERSION, "no version was recorded for the failed migration"
    store.close()
