"""The operator's span export: the records' own ids and times, queued without ever waiting on the collector."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from towline.api.spans import SpanRecord
from towline.tracing import TracingConfig, span_sink

T0 = datetime(2026, 12, 7, 1, 2, 3, 456789, tzinfo=UTC)


class Recorder(SpanExporter):
    def __init__(self, gate: threading.Event | None = None) -> None:
        self.spans: list[ReadableSpan] = []
        self.gate = gate
        self.exporting = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exporting.set()
        if self.gate is not None:
            self.gate.wait()
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def record(span_id: int, parent: int | None = 7) -> SpanRecord:
    return SpanRecord(name=f"step s{span_id}", trace_id=0xABC, span_id=span_id, parent_span_id=parent, start=T0,
                      end=T0 + timedelta(seconds=2), attributes={"towline.step.id": "s"}, error=span_id == 2)


def test_a_span_keeps_the_records_ids_times_parent_and_status() -> None:
    recorder = Recorder()
    sink = span_sink(TracingConfig(), exporter=recorder)
    assert sink is not None
    sink.emit([record(1), record(2, parent=None)])
    sink.shutdown()
    first, second = sorted(recorder.spans, key=lambda span: span.context.span_id)
    assert (first.context.trace_id, first.context.span_id, first.parent.span_id) == (0xABC, 1, 7)  # type: ignore[union-attr]
    assert first.start_time == 1796605323_456789000 and first.end_time == first.start_time + 2_000_000_000
    assert second.parent is None and not second.status.is_ok and first.status.is_ok
    assert first.resource.attributes["service.name"] == "towline-operator"


def test_emit_returns_while_the_collector_hangs_and_drops_past_the_queue() -> None:
    gate = threading.Event()
    recorder = Recorder(gate)
    sink = span_sink(TracingConfig(queue_size=4), exporter=recorder)
    assert sink is not None
    sink.emit([record(1)])
    assert recorder.exporting.wait(30)
    sink.emit([record(n) for n in range(2, 100)])  # would hang here if emitting waited for the export
    gate.set()
    sink.shutdown()
    assert 1 < len(recorder.spans) <= 1 + 4


def test_tracing_is_off_without_an_endpoint() -> None:
    assert span_sink(TracingConfig.from_environment({})) is None


@pytest.mark.parametrize(("name", "value", "named"), [
    ("TOWLINE_TRACING_ENDPOINT", "collector:4318", "tracing.endpoint"),
    ("TOWLINE_TRACING_QUEUE_SIZE", "0", "tracing.queueSize"),
    ("TOWLINE_TRACING_QUEUE_SIZE", "many", "tracing.queueSize"),
])
def test_a_bad_setting_names_the_chart_value(name: str, value: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        TracingConfig.from_environment({name: value})
