"""The CloudEvents Towline emits, as records: what the engine derives from a run's status write and where such records
go; the delivery (towline.eventsink) reads nothing else.

A record holds ids, names, phases and error classes only: never a step's inputs or output, a message (it may quote a
provider's answer), params, trigger data or anything from a Secret (docs/events.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from towline_connectors.wire import rfc3339

SPEC_VERSION = "1.0"
TYPE_PREFIX = "dev.towline."
EVENT_KINDS = ("run", "step", "approval")
"""The families of `type`: dev.towline.run.<phase>, dev.towline.step.<phase>, dev.towline.approval.<what>."""
APPROVAL_EVENTS = ("requested", "decided")

DataValue = str | int | bool | None


@dataclass(frozen=True)
class EventRecord:
    """One CloudEvent (structured JSON mode, specversion 1.0) as Towline sends it."""

    id: str
    """Derived from the run's uid and the transition: the same transition gives the same id, whoever derives it."""
    type: str
    source: str
    """/namespaces/<namespace>/workflows/<workflow>"""
    subject: str
    time: datetime
    data: Mapping[str, DataValue] = field(default_factory=dict)

    def document(self) -> dict[str, object]:
        """The structured-mode JSON object (CloudEvents JSON format)."""
        return {
            "specversion": SPEC_VERSION, "id": self.id, "type": self.type, "source": self.source,
            "subject": self.subject, "time": rfc3339(self.time), "datacontenttype": "application/json",
            "data": dict(self.data),
        }

    def body(self) -> bytes:
        """The bytes sent and signed: the document, minified."""
        return json.dumps(self.document(), separators=(",", ":"), ensure_ascii=False).encode()


class EventEmitter(Protocol):
    """Where a status write's events go (towline.eventsink.EventSink): queued for delivery, never waited for."""

    def emit(self, records: Sequence[EventRecord]) -> None: ...


@dataclass(frozen=True)
class DeadLetter:
    """An event whose delivery failed for good, as kept (towline.k8s.deadletters keeps them in a ConfigMap)."""

    event: dict[str, Any]
    """The CloudEvent document as it was sent (ids, names, phases: never a secret)."""
    attempts: int
    error: str
    failed_at: str

    @property
    def id(self) -> str:
        return str(self.event.get("id", ""))


class DeadLetterStore(Protocol):
    async def keep(self, letter: DeadLetter) -> int:
        """Keep the letter (its id replaces an earlier one; the oldest go past the bound); how many are kept."""

    async def take_replays(self) -> tuple[list[DeadLetter], int]:
        """The letters an admin asked to replay (`kubectl towline deadletters replay`), removed from the store, and
        how many stay kept."""
