"""The trace export of the operator and the webhook ingress: OTLP over HTTP (protobuf) to the chart's
tracing.endpoint, off by default.

The spans are towline.engine.traces' records, made after a status write; here they become OpenTelemetry spans
with the ids and times they carry (never the SDK's random ids or its clock) and go to a BatchSpanProcessor:
`emit` only appends to its bounded queue (a full queue drops spans, counted by the SDK's own log), and a
thread of its own sends batches, so a slow or absent collector never holds up a reconcile.

Why OTLP/HTTP with protobuf rather than gRPC: it needs no grpcio (a native extension of about 10 MB that the
image would carry for this alone), every collector (the OpenTelemetry Collector, Jaeger, Tempo) takes it on
port 4318, and it passes HTTP proxies and ingresses as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from towline.api.spans import SpanRecord

log = logging.getLogger(__name__)

DEFAULT_QUEUE_SIZE = 2048
"""Spans waiting for export at most (the SDK's default); past it new spans are dropped, never waited for."""
SERVICE_NAME = "towline-operator"
_SCOPE = InstrumentationScope("towline.operator")


@dataclass(frozen=True)
class TracingConfig:
    """TOWLINE_TRACING_ENDPOINT (the chart's tracing.endpoint) and TOWLINE_TRACING_QUEUE_SIZE."""

    endpoint: str | None = None
    """The collector's OTLP/HTTP traces URL, e.g. http://collector:4318/v1/traces; None: no traces."""
    queue_size: int = DEFAULT_QUEUE_SIZE

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> TracingConfig:
        endpoint = env.get("TOWLINE_TRACING_ENDPOINT", "").strip()
        if endpoint and (not endpoint.startswith(("http://", "https://")) or " " in endpoint):
            raise ValueError(f"TOWLINE_TRACING_ENDPOINT={endpoint!r} must be an http(s) URL of an OTLP/HTTP traces "
                             "endpoint, like http://otel-collector.monitoring:4318/v1/traces; set tracing.endpoint "
                             "in the chart values (empty: no traces)")
        text = env.get("TOWLINE_TRACING_QUEUE_SIZE", str(DEFAULT_QUEUE_SIZE)).strip()
        if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
            raise ValueError(f"TOWLINE_TRACING_QUEUE_SIZE={text!r} must be a whole number from 1 to 1000000; set "
                             f"tracing.queueSize in the chart values, e.g. {DEFAULT_QUEUE_SIZE}")
        return cls(endpoint=endpoint or None, queue_size=int(text))


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


def span_sink(config: TracingConfig, *, service: str = SERVICE_NAME, exporter: SpanExporter | None = None,
              ) -> SpanSink | None:
    """The process's sink; None when tracing is off. `exporter` replaces OTLP (tests)."""
    if config.endpoint is None and exporter is None:
        return None
    chosen = exporter or OTLPSpanExporter(endpoint=config.endpoint, timeout=10)
    processor = BatchSpanProcessor(chosen, max_queue_size=config.queue_size,
                                   max_export_batch_size=min(512, config.queue_size), schedule_delay_millis=2000)
    log.info("exporting traces over OTLP/HTTP to %s", config.endpoint)
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
