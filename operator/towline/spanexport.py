"""The OpenTelemetry side of the trace export (towline.tracing): run records become the SDK's finished spans, with
the ids and times they carry (never the SDK's random ids or its clock), queued on a BatchSpanProcessor whose own
thread sends them over OTLP/HTTP. Imported only when tracing is on."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from towline.api.spans import SpanRecord

log = logging.getLogger(__name__)

_SCOPE = InstrumentationScope("towline.operator")


class SpanSink:
    """Where a run's finished spans go: queued for a background export."""

    def __init__(self, processor: SpanProcessor, resource: Resource) -> None:
        self._processor = processor
        self._resource = resource

    def emit(self, records: Sequence[SpanRecord]) -> None:
        """Queue the spans; returns at once (the SDK's queue is bounded; a full one drops)."""
        for record in records:
            self._processor.on_end(readable_span(record, self._resource))

    def shutdown(self) -> None:
        """Send what is queued (bounded by the exporter's timeout), then stop the export thread."""
        self._processor.shutdown()


def batched_sink(endpoint: str | None, queue_size: int, *, service: str, exporter: SpanExporter | None = None,
                 ) -> SpanSink:
    """A sink exporting to `endpoint` over OTLP/HTTP (or to `exporter`), at most `queue_size` spans waiting."""
    chosen = exporter or OTLPSpanExporter(endpoint=endpoint, timeout=10)
    processor = BatchSpanProcessor(chosen, max_queue_size=queue_size,
                                   max_export_batch_size=min(512, queue_size), schedule_delay_millis=2000)
    log.info("exporting traces over OTLP/HTTP to %s", endpoint)
    return SpanSink(processor, Resource.create({"service.name": service}))


def readable_span(record: SpanRecord, resource: Resource) -> ReadableSpan:
    """The record as the SDK's finished span: its own ids, parent and times."""
    flags = TraceFlags(TraceFlags.SAMPLED)
    parent = None if record.parent_span_id is None else SpanContext(
        record.trace_id, record.parent_span_id, is_remote=record.remote_parent, trace_flags=flags)
    return ReadableSpan(
        name=record.name,
        context=SpanContext(record.trace_id, record.span_id, is_remote=False, trace_flags=flags),
        parent=parent,
        resource=resource,
        attributes=dict(record.attributes),
        kind=SpanKind.INTERNAL,
        status=Status(StatusCode.ERROR) if record.error else Status(StatusCode.OK),
        start_time=_nanoseconds(record.start),
        end_time=_nanoseconds(record.end),
        instrumentation_scope=_SCOPE,
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _nanoseconds(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000
