"""A loopback OTLP/HTTP receiver for the benchmarks: takes the operator's span batches and counts their spans.

What the operator pays for tracing (building spans, queueing, encoding, sending) is measured against it; a real
collector's own CPU is not the operator's. Parsing happens here, in the benchmark's process.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class OtlpSink:
    """`with OtlpSink() as sink:` serves `sink.url` until the block ends; `sink.spans` counts what arrived."""

    def __init__(self) -> None:
        self.spans = 0
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest.FromString(body)
                with sink.lock:
                    sink.spans += sum(len(scope.spans) for spans in request.resource_spans
                                      for scope in spans.scope_spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/traces"

    def __enter__(self) -> OtlpSink:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None,
                 ) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
