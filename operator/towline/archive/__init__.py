"""The archive: the record that lasts after the cluster forgets a run.

Resource status is the live state and is pruned (history limits, Job TTLs, event TTLs); the archive keeps
every run (its document as the archive component assembles it), every decided approval and every step's
log in SQL, PostgreSQL in production or SQLite on a volume by default, and makes the record
tamper-evident: each namespace's records form a SHA-256 hash chain over RFC 8785 canonical JSON, and the
archive signs checkpoints of the chain's head with an Ed25519 key. `verify` checks a live namespace or an
exported file with only the public key and names the first record that was changed, removed, inserted
or reordered.

This package's storage and chain modules are a library (import-linter keeps them free of kopf, the
Kubernetes clients and the operator's layers); they never read a clock (times are arguments) and never
read the signing key themselves (callers pass it in). See docs/archive.md.

    store = open_store("sqlite:////var/lib/towline/archive.db", now=now)
    store.append(ns, "run", run_uid, document, index=RunIndex(...), recorded_at=now)   # idempotent
    store.sign_head(ns, signing_key, signed_at=now)                                    # every minute
    store.history(HistoryQuery(ns, workflow="deploy-prod", started_from=q3, started_before=q4))
    store.verify(ns, public_key); verify_export(open("audit.jsonl"), public_key)
"""

from towline.archive.chain import (
    Checkpoint,
    canonical,
    checkpoint_signed,
    load_private_key,
    load_public_key,
    public_key_pem,
    record_digest,
    sign_checkpoint,
)
from towline.archive.exports import ExportedChain, read_export, verify_export
from towline.archive.migrations import LATEST_VERSION
from towline.archive.records import (
    GENESIS_DIGEST,
    KINDS,
    Appended,
    ApprovalIndex,
    ArchivedRun,
    ArchiveError,
    Entry,
    HistoryPage,
    HistoryQuery,
    LogIndex,
    RunIndex,
    format_time,
)
from towline.archive.store import ArchiveStore, open_store
from towline.archive.verification import Problem, VerifyResult, verify

__all__ = [
    "GENESIS_DIGEST", "KINDS", "LATEST_VERSION", "Appended", "ApprovalIndex", "ArchiveError", "ArchiveStore",
    "ArchivedRun", "Checkpoint", "Entry", "ExportedChain", "HistoryPage", "HistoryQuery", "LogIndex", "Problem",
    "RunIndex", "VerifyResult", "canonical", "checkpoint_signed", "format_time", "load_private_key",
    "load_public_key", "open_store", "public_key_pem", "read_export", "record_digest", "sign_checkpoint", "verify",
    "verify_export",
]
