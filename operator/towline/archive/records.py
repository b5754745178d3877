"""What goes into the archive and what comes out: records, their indexed fields, queries and errors.

Plain frozen dataclasses and strict readers of the JSON forms (an export file is hostile input: a
malformed line is an `ArchiveError` naming the line and the field, never a KeyError). No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

JSONValue: TypeAlias = "dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"

Kind = Literal["run", "approval", "log", "prune"]
KINDS: tuple[Kind, ...] = ("run", "approval", "log", "prune")
"""`run` (key: the run's UID), `approval` (its UID), `log` (pod UID + "/" + container), `prune` (see chain)."""

GENESIS_DIGEST = "0" * 64
"""The previous digest of a namespace's first record."""

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class ArchiveError(Exception):
    """Bad input or configuration a person can fix; the message names the field and the fix."""


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with microseconds (`2025-07-01T08:00:00.000000Z`): one spelling per instant, so the
    digest of a record never depends on how a caller wrote its time."""
    if moment.tzinfo is None:
        raise ArchiveError(f"time {moment.isoformat()} has no time zone; pass an aware datetime (UTC)")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str, where: str) -> datetime:
    """The instant `format_time` wrote; anything else is an ArchiveError naming `where`."""
    if not isinstance(text, str) or not _TIME.match(text):
        raise ArchiveError(f"{where}: {text!r} is not a time in the form 2025-07-01T08:00:00.000000Z")
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def micros(moment: datetime) -> int:
    """Microseconds since the epoch: how the index tables keep times (compact, ordered the same in both dialects)."""
    if moment.tzinfo is None:
        raise ArchiveError(f"time {moment.isoformat()} has no time zone; pass an aware datetime (UTC)")
    delta = moment.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


@dataclass(frozen=True)
class Entry:
    """One record of a namespace's chain, as stored: `digest` covers everything but itself."""

    namespace: str
    seq: int
    kind: str
    key: str
    recorded_at: str
    body: JSONObject
    prev_digest: str
    digest: str

    def to_json(self) -> JSONObject:
        return {"namespace": self.namespace, "seq": self.seq, "kind": self.kind, "key": self.key,
                "recordedAt": self.recorded_at, "body": self.body, "prevDigest": self.prev_digest,
                "digest": self.digest}

    @classmethod
    def from_json(cls, value: object, where: str) -> Entry:
        """Read an entry strictly: wrong types and missing fields name `where` and the field."""
        obj = _object(value, where)
        body = obj.get("body")
        if not isinstance(body, dict):
            raise ArchiveError(f"{where}: body must be a JSON object")
        return cls(
            namespace=_string(obj, "namespace", where), seq=_int(obj, "seq", where), kind=_string(obj, "kind", where),
            key=_string(obj, "key", where), recorded_at=_string(obj, "recordedAt", where), body=body,
            prev_digest=_string(obj, "prevDigest", where), digest=_string(obj, "digest", where),
        )


@dataclass(frozen=True)
class Appended:
    """What `append` did: `created` is False when the (namespace, kind, key) was already archived, in which
    case `entry` is the record archived first (an append is idempotent: a record is never archived twice)."""

    entry: Entry
    created: bool


@dataclass(frozen=True)
class RunIndex:
    """The fields of a `run` record the history query filters on (the body stays opaque to the store)."""

    name: str
    workflow: str
    phase: str
    requester: str
    started_at: datetime
    finished_at: datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    approvers: tuple[str, ...] = ()
    """Who decided the run's approvals (also filled from its `approval` records)."""


@dataclass(frozen=True)
class ApprovalIndex:
    """The fields of an `approval` record: which run it belongs to and who decided it."""

    run_uid: str
    run_name: str
    step: str
    decided_by: str | None
    decision: str | None


@dataclass(frozen=True)
class LogIndex:
    """Where a `log` record comes from: its run, step, attempt, pod and container."""

    run_uid: str
    run_name: str
    step: str
    attempt: int
    pod_uid: str
    container: str


Index = RunIndex | ApprovalIndex | LogIndex


@dataclass(frozen=True)
class HistoryQuery:
    """`history` filters, all optional but the namespace; runs come newest first (by start time)."""

    namespace: str
    workflow: str | None = None
    requester: str | None = None
    approver: str | None = None
    phase: str | None = None
    started_from: datetime | None = None
    """Inclusive."""
    started_before: datetime | None = None
    """Exclusive."""
    labels: Mapping[str, str] = field(default_factory=dict)
    limit: int = 50
    continue_token: str | None = None


@dataclass(frozen=True)
class ArchivedRun:
    """A `run` record with its indexed fields."""

    entry: Entry
    uid: str
    name: str
    workflow: str
    phase: str
    requester: str
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class HistoryPage:
    runs: list[ArchivedRun]
    continue_token: str | None
    """Pass it back in HistoryQuery.continue_token for the next page; None on the last one."""


def check_digest(value: str, where: str) -> str:
    if not isinstance(value, str) or not _DIGEST.match(value):
        raise ArchiveError(f"{where}: {value!r} is not a SHA-256 digest (64 lowercase hex digits)")
    return value


def check_body(kind: str, body: object) -> JSONObject:
    """The body of a record a caller appends, checked for its kind (the error names the field)."""
    if kind not in KINDS:
        raise ArchiveError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if not isinstance(body, dict):
        raise ArchiveError(f"the body of a {kind} record must be a JSON object, not {type(body).__name__}")
    if kind == "log":
        if not isinstance(body.get("text"), str):
            raise ArchiveError("a log record's body.text must be the log's text (a string)")
        if not isinstance(body.get("bytes"), int) or isinstance(body.get("bytes"), bool):
            raise ArchiveError("a log record's body.bytes must be the log's size before any cut (an integer)")
        if not isinstance(body.get("truncated"), bool):
            raise ArchiveError("a log record's body.truncated must say whether the log was cut at the cap (a boolean)")
    return body


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ArchiveError(f"{where}: expected a JSON object")
    return value


def _string(obj: Mapping[str, Any], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise ArchiveError(f"{where}: {name} must be a string")
    return value


def _int(obj: Mapping[str, Any], name: str, where: str) -> int:
    value = obj.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArchiveError(f"{where}: {name} must be an integer")
    return value
