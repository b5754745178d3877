"""The trace export of the operator and the webhook ingress: OTLP over HTTP (protobuf) to the chart's
tracing.endpoint, off by default.

The spans are towline.engine.traces' records, made after a status write; the sink `span_sink` returns
(towline.spanexport) makes them OpenTelemetry spans with the ids and times they carry (never the SDK's random
ids or its clock) and hands them to a BatchSpanProcessor: `emit` only appends to its bounded queue (a full queue
drops spans, counted by the SDK's own log), and a thread of its own sends batches, so a slow or absent collector
never holds up a reconcile.

Why OTLP/HTTP with protobuf rather than gRPC: it needs no grpcio (a native extension of about 10 MB that the
image would carry for this alone), every collector (the OpenTelemetry Collector, Jaeger, Tempo) takes it on
port 4318, and it passes HTTP proxies and ingresses as they are.

The OpenTelemetry SDK and its exporter are loaded only when tracing is on (`span_sink` imports towline.spanexport):
with it off, the chart's default, neither process holds them in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from towline.spanexport import SpanSink

DEFAULT_QUEUE_SIZE = 2048
"""Spans waiting for export at most (the SDK's default); past it new spans are dropped, never waited for."""
SERVICE_NAME = "towline-operator"


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


def span_sink(config: TracingConfig, *, service: str = SERVICE_NAME, exporter: SpanExporter | None = None,
              ) -> SpanSink | None:
    """The process's sink; None when tracing is off (and the SDK is then never imported). `exporter` replaces
    OTLP (tests)."""
    if config.endpoint is None and exporter is None:
        return None
    from towline.spanexport import batched_sink  # noqa: PLC0415 - the SDK only when tracing is on

    return batched_sink(config.endpoint, config.queue_size, service=service, exporter=exporter)
