"""The delivery's span: the root of the trace of a run a webhook started, carried to the operator on the run.

The ingress makes a new trace per delivery that starts a run, names its own span in the run's
towline.dev/traceparent annotation (which the run-updates admission policy keeps as created), and emits that span
once the run exists; the operator's spans of the run then hang under it (towline.engine.traces). A sender's own
traceparent header is not continued: it is the sender's word, unsigned, and a run's trace should not be one a
stranger chose. What the span carries: the namespace, Workflow, trigger and run names, never the payload.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from towline.api.spans import SpanEmitter, SpanRecord
from towline_step.protocol import TraceParent


@dataclass(frozen=True)
class DeliverySpan:
    """A delivery being turned into a run: its span's place in a new trace, and when it began."""

    parent: TraceParent
    start: datetime

    @property
    def traceparent(self) -> str:
        return self.parent.header()


def _random_id(bits: int) -> int:
    return secrets.randbits(bits) or 1


@dataclass(frozen=True)
class DeliveryTracer:
    """Begins and emits deliveries' spans; `ids` and `clock` are seams for tests."""

    spans: SpanEmitter
    ids: Callable[[int], int] = _random_id
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def begin(self) -> DeliverySpan:
        return DeliverySpan(TraceParent(self.ids(128), self.ids(64)), self.clock())

    def created(self, span: DeliverySpan, *, namespace: str, workflow: str, trigger: str, run: str) -> None:
        """The run now exists: the delivery's span ends and is queued for export."""
        self.spans.emit([SpanRecord(
            name=f"delivery {workflow}/{trigger}", trace_id=span.parent.trace_id, span_id=span.parent.span_id,
            parent_span_id=None, start=span.start, end=max(self.clock(), span.start),
            attributes={"k8s.namespace.name": namespace, "towline.workflow": workflow, "towline.trigger": trigger,
                        "towline.run.name": run},
        )])
