"""Retention: delete a namespace's oldest records, leaving a chain that still verifies.

Only a prefix of the chain goes (the records recorded before the cut-off), only as far as a signed
checkpoint covers (a record nobody signed yet could be a forgery this would launder), and only after that
prefix verifies: signing an anchor over a tampered prefix would hide the tampering for good. The anchor is
a checkpoint at the last deleted seq, kept when the older checkpoints go; the `prune` record appended
after the deletion carries it too, so the prune itself is part of the chain and signed.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline.archive.chain import Checkpoint, checkpoint_signed, prune_body, sign_checkpoint
from towline.archive.db import Param
from towline.archive.records import ArchiveError, Entry, format_time, micros
from towline.archive.verification import verify

if TYPE_CHECKING:
    from towline.archive.sqlstore import SqlArchiveStore


def prune(
    store: SqlArchiveStore, namespace: str, before: datetime, private_key: Ed25519PrivateKey, now: datetime,
) -> Entry | None:
    """Prune `namespace`'s records recorded before `before`; the `prune` record, or None if none were."""
    database = store.database
    first = store.first_seq(namespace)
    latest = store.latest_checkpoint(namespace)
    if latest is None:
        return None
    rows = database.execute("SELECT MIN(seq) FROM entries WHERE namespace = ? AND recorded_us >= ?",
                            [namespace, micros(before)])
    newer = int(str(rows[0][0])) if rows[0][0] is not None else latest.seq + 1
    through = min(newer - 1, latest.seq)
    if through < first:
        return None
    public_key = private_key.public_key()
    result = verify(namespace, (entry for entry in store.entries(namespace, first) if entry.seq <= through),
                    [checkpoint for checkpoint in store.checkpoints(namespace) if checkpoint.seq <= through],
                    public_key, first_seq=first)
    if not result.ok or result.head_seq != through:
        reason = result.problem.message if result.problem is not None else f"the chain ends at {result.head_seq}"
        raise ArchiveError(f"prune of namespace {namespace} refused: {reason}. Pruning would hide it; keep the "
                           "records and investigate (kubectl towline verify)")
    anchor = _anchor(store, namespace, seq=through, digest=result.head_digest, private_key=private_key, now=now)
    with database.transaction(write=True):
        store.lock_head(namespace)  # appends wait: the deletion and the prune record are one step
        deleted = _delete_through(store, namespace, through)
        body = prune_body(anchor, before=format_time(before), deleted=deleted)
        appended = store.append_locked(namespace, "prune", str(through), body, index=None, recorded_at=now)
    return appended.entry


def _anchor(
    store: SqlArchiveStore, namespace: str, *, seq: int, digest: str, private_key: Ed25519PrivateKey, now: datetime,
) -> Checkpoint:
    """The checkpoint at `seq` (the one kept if it is sound, else a new one)."""
    for checkpoint in store.checkpoints(namespace, seq):
        if checkpoint.seq == seq and checkpoint.head_digest == digest and \
                checkpoint_signed(checkpoint, private_key.public_key()):
            return checkpoint
        break
    anchor = sign_checkpoint(private_key, namespace, seq, digest, format_time(now))
    store.database.execute("DELETE FROM checkpoints WHERE namespace = ? AND seq = ?", [namespace, seq])
    store.add_checkpoint(anchor)
    return anchor


def _delete_through(store: SqlArchiveStore, namespace: str, through: int) -> int:
    """Delete records 1..through with their index rows (the anchor checkpoint stays); how many records."""
    execute = store.database.execute
    params: list[Param] = [namespace, through]
    pruned_runs = "SELECT key FROM entries WHERE namespace = ? AND kind = 'run' AND seq <= ?"
    pruned_approvals = "SELECT key FROM entries WHERE namespace = ? AND kind = 'approval' AND seq <= ?"
    execute(f"DELETE FROM run_labels WHERE namespace = ? AND uid IN ({pruned_runs})", [namespace, *params])
    execute(f"DELETE FROM approvers WHERE namespace = ? AND run_uid IN ({pruned_runs})", [namespace, *params])
    execute(f"DELETE FROM runs WHERE namespace = ? AND uid IN ({pruned_runs})", [namespace, *params])
    execute(f"DELETE FROM approvals WHERE namespace = ? AND uid IN ({pruned_approvals})", [namespace, *params])
    execute("DELETE FROM logs WHERE namespace = ? AND seq <= ?", params)
    counted = execute("SELECT COUNT(*) FROM entries WHERE namespace = ? AND seq <= ?", params)
    execute("DELETE FROM entries WHERE namespace = ? AND seq <= ?", params)
    execute("DELETE FROM checkpoints WHERE namespace = ? AND seq < ?", params)
    return int(str(counted[0][0]))
