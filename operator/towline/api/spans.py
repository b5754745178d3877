"""Finished spans as Towline records them: the record the engine derives from a run's status and the ingress from a
delivery, and where such records go; the OpenTelemetry export (towline.tracing) reads nothing else."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

AttributeValue = str | int | bool


@dataclass(frozen=True)
class SpanRecord:
    """One finished span, as the exporter sends it."""

    name: str
    trace_id: int
    span_id: int
    parent_span_id: int | None
    start: datetime
    end: datetime
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    error: bool = False
    remote_parent: bool = False
    """The parent is another process's span (the ingress's delivery)."""


class SpanEmitter(Protocol):
    """Where finished spans go (towline.spanexport.SpanSink): queued for export, never waited for."""

    def emit(self, records: Sequence[SpanRecord]) -> None: ...
