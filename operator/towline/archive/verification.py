"""Verify a namespace's chain with only the public key, and name the first record that is wrong. Pure.

The entries are read in the order given (the store's order by seq, or an export's line order) and in one
pass while all is well; at the first record that does not fit, the rest is read once more in a compact
form (digests and identities, no bodies) to say what happened there:

- changed:   a record's content no longer matches its digest (or matches, but the next record, or a
             signed checkpoint, links to another digest: it was changed and its digest recomputed);
- removed:   a record is missing (a gap in seq, a record that links past it, or a signed checkpoint
             beyond the last record);
- inserted:  a record that links to nothing in the chain, or a copy of one already there;
- reordered: a genuine record in the wrong place, while the record that belongs there comes later.

What no chain can tell: records after the last signed checkpoint may be cut off, or forged at the end,
by whoever writes the database; `VerifyResult.unsigned` counts them so the reader knows what is covered.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from towline.archive.chain import Checkpoint, checkpoint_signed, entry_digest, intact, prune_anchor
from towline.archive.records import GENESIS_DIGEST, ArchiveError, Entry

What = Literal["changed", "removed", "inserted", "reordered", "bad-checkpoint"]


@dataclass(frozen=True)
class Problem:
    """The first thing wrong: what, and which record (by namespace, seq, kind and key) it is."""

    what: What
    namespace: str
    seq: int
    """The position in the chain where it shows (for `removed`, the first missing seq)."""
    kind: str | None
    """The record's kind and key, when the record is there to name (not for `removed`)."""
    key: str | None
    message: str


@dataclass(frozen=True)
class VerifyResult:
    namespace: str
    ok: bool
    problem: Problem | None
    records: int
    """Records read before the first problem (all of them when ok)."""
    first_seq: int
    head_seq: int
    """The last verified record's seq (first_seq - 1 when none)."""
    head_digest: str
    signed_through: int
    """The highest seq a verified checkpoint covers (0: none)."""
    unsigned: int
    """Verified records after that checkpoint: linked, but not yet covered by a signature."""
    checkpoints: int
    """Checkpoints whose signature verified."""


@dataclass(frozen=True)
class _Seen:
    """One entry after the first problem, without its body."""

    seq: int
    kind: str
    key: str
    digest: str
    prev_digest: str
    fits_here: bool
    """Intact at the seq and namespace the chain expected at the first problem."""


@dataclass
class _Walk:
    """Where verification stands: the next seq expected, the digest it must link to, the last good record."""

    namespace: str
    signed: dict[int, Checkpoint]
    first_seq: int
    seq: int
    digest: str
    records: int = 0
    last_good: Entry | None = None

    def result(self, problem: Problem | None) -> VerifyResult:
        head_seq = self.seq - 1
        signed_through = max((s for s in self.signed if s <= head_seq), default=0)
        return VerifyResult(namespace=self.namespace, ok=problem is None, problem=problem, records=self.records,
                            first_seq=self.first_seq, head_seq=head_seq, head_digest=self.digest,
                            signed_through=signed_through,
                            unsigned=max(0, head_seq - max(signed_through, self.first_seq - 1)),
                            checkpoints=len(self.signed))


def verify(
    namespace: str,
    entries: Iterable[Entry],
    checkpoints: Iterable[Checkpoint],
    public_key: Ed25519PublicKey,
    *,
    first_seq: int | None = None,
    anchor: Checkpoint | None = None,
) -> VerifyResult:
    """Verify `namespace`'s chain. `first_seq` is where it should start (1, or one past a signed anchor);
    by default the first entry's seq. `anchor`: the checkpoint at first_seq - 1 as an earlier pass verified it
    (the archive's hourly pass goes on from there); the store must still hold exactly that checkpoint."""
    signed, forged = _signed(namespace, checkpoints, public_key)
    if forged is None and anchor is not None and signed.get(anchor.seq) != anchor:
        forged = Problem("bad-checkpoint", namespace, anchor.seq, "checkpoint", None,
                         f"the checkpoint of seq {anchor.seq} signed at {anchor.signed_at}, verified before, "
                         "was changed or removed since")
    stream = iter(entries)
    first = next(stream, None)
    start = first_seq if first_seq is not None else (first.seq if first is not None else 1)
    walk = _Walk(namespace, signed, start, start, GENESIS_DIGEST)
    unanchored = forged or _anchor(walk)
    if unanchored is not None:
        return walk.result(unanchored)
    upcoming = _chain(first, stream)
    for entry in upcoming:
        if entry.namespace != namespace or entry.seq != walk.seq or entry.prev_digest != walk.digest \
                or not intact(entry):
            return walk.result(_classify(walk, entry, upcoming))
        checkpoint = signed.get(entry.seq)
        if checkpoint is not None and checkpoint.head_digest != entry.digest:
            return walk.result(_contradicted(entry, checkpoint, upcoming))
        contradiction = _check_prune(entry, signed, public_key)
        if contradiction is not None:
            return walk.result(contradiction)
        walk.records, walk.seq, walk.digest, walk.last_good = walk.records + 1, walk.seq + 1, entry.digest, entry
    beyond = sorted(s for s in signed if s >= walk.seq)
    if beyond:
        return walk.result(Problem(
            "removed", namespace, walk.seq, None, None,
            f"records seq {walk.seq} to {beyond[-1]} are missing: a checkpoint signed at "
            f"{signed[beyond[-1]].signed_at} covers {beyond[-1]} records, the chain ends at {walk.seq - 1}"))
    return walk.result(None)


def _signed(
    namespace: str, checkpoints: Iterable[Checkpoint], public_key: Ed25519PublicKey,
) -> tuple[dict[int, Checkpoint], Problem | None]:
    """The checkpoints by seq, or the first one whose signature does not verify."""
    signed: dict[int, Checkpoint] = {}
    for checkpoint in checkpoints:
        if checkpoint.namespace != namespace or not checkpoint_signed(checkpoint, public_key):
            return {}, Problem("bad-checkpoint", namespace, checkpoint.seq, "checkpoint", None,
                               f"the checkpoint of seq {checkpoint.seq} signed at {checkpoint.signed_at} "
                               f"(key {checkpoint.key_id}) does not verify with this public key for "
                               f"namespace {namespace}: it was changed, forged, or signed by another key")
        signed[checkpoint.seq] = checkpoint
    return signed, None


def _anchor(walk: _Walk) -> Problem | None:
    """A chain that does not start at seq 1 starts from a signed checkpoint of the seq before it."""
    if walk.first_seq == 1:
        return None
    anchor = walk.signed.get(walk.first_seq - 1)
    if anchor is not None:
        walk.digest = anchor.head_digest
        return None
    below = [s for s in walk.signed if s < walk.first_seq - 1]
    missing = max(below) + 1 if below else 1
    return Problem("removed", walk.namespace, missing, None, None,
                   f"the chain starts at seq {walk.first_seq} but no signed checkpoint anchors seq "
                   f"{walk.first_seq - 1}: records from seq {missing} were removed without a signed prune")


def _chain(first: Entry | None, rest: Iterator[Entry]) -> Iterator[Entry]:
    if first is not None:
        yield first
    yield from rest


def _contradicted(entry: Entry, checkpoint: Checkpoint, rest: Iterator[Entry]) -> Problem:
    """A record that links correctly but not to what a checkpoint signed: either it was slipped in before the
    signed record (which comes later, intact), or the chain was rewritten up to here."""
    here = f"seq {entry.seq} ({entry.kind} {entry.key})"
    for other in rest:
        if other.digest == checkpoint.head_digest and intact(other, namespace=entry.namespace, seq=entry.seq):
            return Problem("inserted", entry.namespace, entry.seq, entry.kind, entry.key,
                           f"{here} was inserted: the record signed at seq {entry.seq} ({other.kind} {other.key}) "
                           "follows it")
    return Problem("changed", entry.namespace, entry.seq, entry.kind, entry.key,
                   f"{here} does not match the checkpoint signed at {checkpoint.signed_at}: this record, or one "
                   "before it since the previous checkpoint, was changed and the chain's digests recomputed")


def _check_prune(entry: Entry, signed: dict[int, Checkpoint], public_key: Ed25519PublicKey) -> Problem | None:
    """A prune record must carry an anchor the archive signed (agreeing with a kept checkpoint of its seq)."""
    if entry.kind != "prune":
        return None
    try:
        anchor = prune_anchor(entry.body, f"seq {entry.seq}")
    except ArchiveError as error:
        reason = str(error)
    else:
        kept = signed.get(anchor.seq)
        if anchor.namespace != entry.namespace or not checkpoint_signed(anchor, public_key):
            reason = "its anchor is not signed by this key for this namespace"
        elif kept is not None and kept.head_digest != anchor.head_digest:
            reason = "its anchor contradicts the signed checkpoint of the same seq"
        else:
            return None
    return Problem("changed", entry.namespace, entry.seq, entry.kind, entry.key,
                   f"prune record seq {entry.seq}: {reason}")


def _classify(walk: _Walk, entry: Entry, rest: Iterator[Entry]) -> Problem:
    """Say what happened at the first record that does not fit (at walk.seq, which must link to walk.digest)."""
    namespace, seq, here = walk.namespace, walk.seq, f"seq {walk.seq} ({entry.kind} {entry.key})"
    later = [_seen(other, namespace, seq) for other in rest]
    belongs = next((seen for seen in later if seen.fits_here and seen.prev_digest == walk.digest), None)
    if belongs is not None:
        return _out_of_place(walk, entry, belongs, {seen.digest for seen in later})
    if entry.seq == seq and entry.prev_digest == walk.digest:
        return Problem("changed", namespace, seq, entry.kind, entry.key,
                       f"{here} was changed: its content no longer matches its digest")
    return _broken_link(walk, entry)


def _broken_link(walk: _Walk, entry: Entry) -> Problem:
    """`entry` neither links to the last good record nor has a place later: something before it went, was
    slipped in, or was rewritten."""
    namespace, seq, here = walk.namespace, walk.seq, f"seq {walk.seq} ({entry.kind} {entry.key})"
    own_place = entry.namespace == namespace and intact(entry)
    if (own_place and entry.seq > seq) or intact(entry, namespace=namespace, seq=seq + 1):
        through = entry.seq - 1 if own_place and entry.seq > seq else seq
        which = f"seq {seq}" if through == seq else f"seq {seq} to {through}"
        return Problem("removed", namespace, seq, None, None,
                       f"{which} removed: the chain goes on at seq {through + 1} ({entry.kind} {entry.key})")
    last = walk.last_good
    if last is not None and walk.signed.get(last.seq) is None and entry.prev_digest == last.prev_digest \
            and intact(entry, namespace=namespace, seq=last.seq):
        return Problem("inserted", namespace, last.seq, last.kind, last.key,
                       f"seq {last.seq} ({last.kind} {last.key}) was inserted: the record after it, "
                       f"{entry.kind} {entry.key}, is the one that belongs at seq {last.seq}")
    if own_place and entry.seq == seq and last is not None and walk.signed.get(last.seq) is None:
        return Problem("changed", namespace, last.seq, last.kind, last.key,
                       f"seq {last.seq} ({last.kind} {last.key}) was changed and its digest "
                       f"recomputed: the next record, {here}, links to another digest")
    if own_place and entry.seq <= seq:
        return Problem("inserted", namespace, seq, entry.kind, entry.key,
                       f"{here} was inserted: it links to no record of this chain")
    return Problem("changed", namespace, seq, entry.kind, entry.key,
                   f"{here} was changed: its content, seq or link no longer matches its digest")


def _out_of_place(walk: _Walk, entry: Entry, belongs: _Seen, later_digests: set[str]) -> Problem:
    """The record that belongs here comes later: `entry` is either a stranger (inserted) or a record of
    this chain from elsewhere (reordered)."""
    here = f"seq {walk.seq} ({entry.kind} {entry.key})"
    expected = f"the record that belongs at seq {walk.seq} ({belongs.kind} {belongs.key})"
    if entry.digest in later_digests or entry.prev_digest not in later_digests:
        return Problem("inserted", walk.namespace, walk.seq, entry.kind, entry.key,
                       f"{here} was inserted: it does not belong to the chain, and {expected} follows it")
    return Problem("reordered", walk.namespace, walk.seq, entry.kind, entry.key,
                   f"{here} is out of order: it is a record from later in the chain, and {expected} comes after it")


def _seen(entry: Entry, namespace: str, seq: int) -> _Seen:
    fits = entry_digest(entry, namespace=namespace, seq=seq) == entry.digest
    return _Seen(entry.seq, entry.kind, entry.key, entry.digest, entry.prev_digest, fits)
