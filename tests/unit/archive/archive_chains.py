"""Chains built in memory, as the store builds them, for the verify tests (no database)."""

from __future__ import annotations

from dataclasses import replace

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline.archive.chain import Checkpoint, record_digest, sign_checkpoint
from towline.archive.records import GENESIS_DIGEST, Entry, JSONObject

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
NAMESPACE = "team-a"
SIGNED_AT = "2025-07-01T08:00:00.000000Z"


def make_entry(seq: int, prev: str, *, kind: str = "run", key: str | None = None, body: JSONObject | None = None,
               namespace: str = NAMESPACE) -> Entry:
    key = key or f"uid-{seq}"
    body = body if body is not None else {"metadata": {"name": f"run-{seq}"}, "status": {"phase": "Succeeded"}}
    recorded_at = f"2025-07-01T08:{seq // 60 % 60:02d}:{seq % 60:02d}.000000Z"
    digest = record_digest(prev, namespace=namespace, seq=seq, kind=kind, key=key, recorded_at=recorded_at,
                           body=body)
    return Entry(namespace=namespace, seq=seq, kind=kind, key=key, recorded_at=recorded_at, body=body,
                 prev_digest=prev, digest=digest)


def make_chain(count: int, *, start: int = 1, prev: str = GENESIS_DIGEST) -> list[Entry]:
    entries = []
    for seq in range(start, start + count):
        entry = make_entry(seq, prev)
        entries.append(entry)
        prev = entry.digest
    return entries


def checkpoint_at(entry: Entry, key: Ed25519PrivateKey = KEY) -> Checkpoint:
    return sign_checkpoint(key, entry.namespace, entry.seq, entry.digest, SIGNED_AT)


def rehash(entry: Entry) -> Entry:
    """The entry with its digest recomputed, as someone who can write the database would."""
    digest = record_digest(entry.prev_digest, namespace=entry.namespace, seq=entry.seq, kind=entry.kind,
                           key=entry.key, recorded_at=entry.recorded_at, body=entry.body)
    return replace(entry, digest=digest)
