"""The export file: a namespace's chain as JSON lines an auditor verifies offline with the public key.

    {"format": "towline.dev/archive-export", "version": 1, "namespace": ..., "firstSeq": N, ...}   header
    {"type": "checkpoint", "checkpoint": {...}}                                                    all first
    {"type": "entry", "entry": {...}}                                                              seq order

The header is self-describing (digest, canonicalization, where the chain starts) but trusts nothing: the
file verifies only through the signed checkpoints it carries, the first at `firstSeq - 1` when the
export does not start at the chain's beginning. Reading is strict and streams the records (a file of a
million runs is never held in memory); the checkpoints come first so they are known before the records.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from towline.archive.chain import CHECKPOINT_FORMAT, Checkpoint
from towline.archive.records import GENESIS_DIGEST, ArchiveError, Entry, format_time, micros
from towline.archive.verification import VerifyResult, verify

if TYPE_CHECKING:
    from towline.archive.sqlstore import SqlArchiveStore

EXPORT_FORMAT = "towline.dev/archive-export"
EXPORT_VERSION = 1


@dataclass(frozen=True)
class ExportedChain:
    namespace: str
    first_seq: int
    checkpoints: list[Checkpoint]
    entries: Iterator[Entry]
    """In file order; read once."""


def export(store: SqlArchiveStore, namespace: str, since: datetime | None) -> Iterator[str]:
    """The export lines of `namespace` (each ending in a newline), from the last checkpoint before `since`."""
    first = _start(store, namespace, since)
    header = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "namespace": namespace, "firstSeq": first,
              "since": format_time(since) if since is not None else None, "digest": "SHA-256",
              "canonicalization": "RFC 8785", "genesisDigest": GENESIS_DIGEST, "checkpointFormat": CHECKPOINT_FORMAT,
              "signature": "Ed25519"}
    yield _line(header)
    for checkpoint in store.checkpoints(namespace, first - 1):
        yield _line({"type": "checkpoint", "checkpoint": checkpoint.to_json()})
    for entry in store.entries(namespace, first):
        yield _line({"type": "entry", "entry": entry.to_json()})


def _start(store: SqlArchiveStore, namespace: str, since: datetime | None) -> int:
    """Where the export starts: the first retained record, or the record after the last checkpoint that
    precedes `since` (a checkpoint there anchors the export's first record)."""
    first = store.first_seq(namespace)
    if since is None:
        return first
    rows = store.database.execute("SELECT MIN(seq) FROM entries WHERE namespace = ? AND recorded_us >= ?",
                                  [namespace, micros(since)])
    wanted = int(str(rows[0][0])) if rows[0][0] is not None else store.head(namespace)[0] + 1
    rows = store.database.execute("SELECT MAX(seq) FROM checkpoints WHERE namespace = ? AND seq < ? AND seq >= ?",
                                  [namespace, wanted, first - 1])
    anchored = int(str(rows[0][0])) + 1 if rows[0][0] is not None else first
    return max(first, anchored)


def _line(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n"


def read_export(lines: Iterable[str]) -> ExportedChain:
    """Read an export strictly; an ArchiveError names the line and what is wrong with it."""
    numbered = ((number, line) for number, line in enumerate(lines, start=1) if line.strip())
    header_number, header_line = next(numbered, (1, ""))
    header = _object(header_line, header_number)
    if header.get("format") != EXPORT_FORMAT:
        raise ArchiveError(f"line {header_number}: not a Towline archive export (format must be {EXPORT_FORMAT!r})")
    if header.get("version") != EXPORT_VERSION:
        raise ArchiveError(f"line {header_number}: export version {header.get('version')!r}; this Towline reads "
                           f"version {EXPORT_VERSION} (verify it with the release that wrote it)")
    namespace, first_seq = header.get("namespace"), header.get("firstSeq")
    if not isinstance(namespace, str) or not isinstance(first_seq, int) or isinstance(first_seq, bool) \
            or first_seq < 1:
        raise ArchiveError(f"line {header_number}: the header needs namespace (a string) and firstSeq (>= 1)")
    checkpoints: list[Checkpoint] = []
    pending: tuple[int, dict[str, Any]] | None = None
    for number, line in numbered:
        value = _object(line, number)
        if value.get("type") != "checkpoint":
            pending = (number, value)
            break
        checkpoints.append(Checkpoint.from_json(value.get("checkpoint"), f"line {number}"))
    return ExportedChain(namespace=namespace, first_seq=first_seq, checkpoints=checkpoints,
                         entries=_entries(pending, numbered))


def _entries(pending: tuple[int, dict[str, Any]] | None, rest: Iterator[tuple[int, str]]) -> Iterator[Entry]:
    if pending is None:
        return
    number, value = pending
    while True:
        kind = value.get("type")
        if kind == "checkpoint":
            raise ArchiveError(f"line {number}: a checkpoint after the records; an export lists its checkpoints "
                               "first (was the file reordered?)")
        if kind != "entry":
            raise ArchiveError(f"line {number}: type must be \"entry\" or \"checkpoint\", not {kind!r}")
        yield Entry.from_json(value.get("entry"), f"line {number}")
        following = next(rest, None)
        if following is None:
            return
        number, value = following[0], _object(following[1], following[0])


def _object(line: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        raise ArchiveError(f"line {number}: not JSON ({error.msg} at column {error.colno})") from error
    if not isinstance(value, dict):
        raise ArchiveError(f"line {number}: expected a JSON object")
    return value


def verify_export(lines: Iterable[str], public_key: Ed25519PublicKey) -> VerifyResult:
    """Verify an export offline with only the public key."""
    chain = read_export(lines)
    return verify(chain.namespace, chain.entries, chain.checkpoints, public_key, first_seq=chain.first_seq)
