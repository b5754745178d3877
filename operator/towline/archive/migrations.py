"""The archive's schema, as numbered migrations per dialect, applied in one transaction when a store opens.

Why not Alembic: two dialects and a handful of statements, no ORM anywhere; a list of numbered SQL
statements and a `schema_migrations` table is all Alembic would do here, without a second dependency
tree and a migration environment to ship in the image. Rules: a migration, once released, is never
edited (add the next number); each one is written for both dialects; a database newer than this code is
refused, never written to.

Times in the index tables are integer microseconds since the epoch (ordered the same in both dialects and
in every collation); a record's `recorded_at` text is what its digest covers.
"""

from __future__ import annotations

from dataclasses import dataclass

from towline.archive.db import Database
from towline.archive.records import ArchiveError

MIGRATION_LOCK = 7_402_117_845
"""A PostgreSQL advisory lock key: two archive replicas starting at once migrate one after the other."""


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    """SQL both dialects accept; `postgresql_only`/`sqlite_only` hold what only one of them does."""
    postgresql_only: tuple[str, ...] = ()
    sqlite_only: tuple[str, ...] = ()

    def for_dialect(self, dialect: str) -> tuple[str, ...]:
        extra = self.postgresql_only if dialect == "postgresql" else self.sqlite_only
        return self.statements + extra


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the chain (entries, heads, checkpoints) and the history indexes", (
        """CREATE TABLE chain_heads (
            namespace TEXT PRIMARY KEY,
            seq BIGINT NOT NULL,
            digest TEXT NOT NULL)""",
        """CREATE TABLE entries (
            namespace TEXT NOT NULL,
            seq BIGINT NOT NULL,
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            recorded_us BIGINT NOT NULL,
            body TEXT NOT NULL,
            prev_digest TEXT NOT NULL,
            digest TEXT NOT NULL,
            PRIMARY KEY (namespace, seq),
            UNIQUE (namespace, kind, key))""",
        """CREATE TABLE checkpoints (
            namespace TEXT NOT NULL,
            seq BIGINT NOT NULL,
            head_digest TEXT NOT NULL,
            signed_at TEXT NOT NULL,
            key_id TEXT NOT NULL,
            signature TEXT NOT NULL,
            PRIMARY KEY (namespace, seq))""",
        """CREATE TABLE runs (
            namespace TEXT NOT NULL,
            uid TEXT NOT NULL,
            seq BIGINT NOT NULL,
            name TEXT NOT NULL,
            workflow TEXT NOT NULL,
            phase TEXT NOT NULL,
            requester TEXT NOT NULL,
            started_us BIGINT NOT NULL,
            finished_us BIGINT,
            PRIMARY KEY (namespace, uid))""",
        # History pages walk these backwards (newest first) from a (started_us, seq) keyset.
        "CREATE INDEX runs_by_workflow ON runs (namespace, workflow, started_us, seq)",
        "CREATE INDEX runs_by_start ON runs (namespace, started_us, seq)",
        "CREATE INDEX runs_by_requester ON runs (namespace, requester, started_us, seq)",
        "CREATE INDEX runs_by_name ON runs (namespace, name)",
        """CREATE TABLE run_labels (
            namespace TEXT NOT NULL,
            uid TEXT NOT NULL,
            name TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (namespace, uid, name))""",
        "CREATE INDEX run_labels_by_label ON run_labels (namespace, name, value)",
        """CREATE TABLE approvers (
            namespace TEXT NOT NULL,
            run_uid TEXT NOT NULL,
            approver TEXT NOT NULL,
            PRIMARY KEY (namespace, run_uid, approver))""",
        "CREATE INDEX approvers_by_approver ON approvers (namespace, approver)",
        """CREATE TABLE approvals (
            namespace TEXT NOT NULL,
            uid TEXT NOT NULL,
            seq BIGINT NOT NULL,
            run_uid TEXT NOT NULL,
            run_name TEXT NOT NULL,
            step TEXT NOT NULL,
            decided_by TEXT,
            decision TEXT,
            PRIMARY KEY (namespace, uid))""",
        "CREATE INDEX approvals_by_run ON approvals (namespace, run_uid)",
        """CREATE TABLE logs (
            namespace TEXT NOT NULL,
            seq BIGINT NOT NULL,
            run_uid TEXT NOT NULL,
            run_name TEXT NOT NULL,
            step TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            pod_uid TEXT NOT NULL,
            container TEXT NOT NULL,
            PRIMARY KEY (namespace, seq))""",
        "CREATE INDEX logs_by_run ON logs (namespace, run_uid, step)",
        "CREATE INDEX logs_by_run_name ON logs (namespace, run_name)",
    )),
)

LATEST_VERSION = MIGRATIONS[-1].version

_CREATE_VERSIONS = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at TEXT NOT NULL)"""


def schema_version(database: Database) -> int:
    """The highest migration applied (0: an empty database)."""
    rows = database.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
    return int(str(rows[0][0]))


def migrate(database: Database, *, applied_at: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Apply every migration the database lacks, in order, in one transaction; the versions applied.

    A database already past the newest migration this code knows is refused (an older archive must not
    write to a schema it does not know)."""
    with database.transaction(write=True):
        if database.dialect == "postgresql":
            database.execute(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        database.execute(_CREATE_VERSIONS)
        current = schema_version(database)
        newest = migrations[-1].version
        if current > newest:
            raise ArchiveError(f"the archive database is at schema version {current}, newer than this archive "
                               f"knows ({newest}): run the newer Towline release that wrote it")
        applied = []
        for migration in migrations:
            if migration.version <= current:
                continue
            for statement in migration.for_dialect(database.dialect):
                database.execute(statement)
            database.execute("INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)",
                             [migration.version, migration.description, applied_at])
            applied.append(migration.version)
        return applied

