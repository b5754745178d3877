"""A run's trace: which spans a status write finished, with ids derived from the run, never remembered.

Pure: the spans come from the status before and after one write (the only place a step's start and end are
recorded), so whichever process or shard makes the write that ends an attempt emits that attempt's span, once,
with times from the status; a restarted operator reads the ended attempt from the status and has nothing to emit.
Span ids are hashes of the run's uid, the step and the attempt, so the attempt's span id is known before it ends
(its Job's TRACEPARENT names it as parent) and a run's spans meet under one run span whoever emits them.

What a span carries: ids, names, phases, error classes and image digests. Never a step's inputs or output,
a message (it may quote a provider's answer), params, trigger data, or anything from a Secret.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from towline.api.loopids import loop_of
from towline.api.run import StepStatus, WorkflowRunStatus
from towline.api.runterms import TERMINAL_RUN_PHASES, TRACEPARENT_ANNOTATION
from towline.api.spans import AttributeValue, SpanRecord
from towline.engine.phases import TERMINAL_STEP_PHASES
from towline_step.protocol import TraceParent, parse_traceparent


@dataclass(frozen=True)
class TracedRun:
    """What names a run's spans: its identity and the trace it joins."""

    uid: str
    name: str
    namespace: str
    workflow: str
    trigger: str
    parent: TraceParent | None = None
    """The span the run continues (its towline.dev/traceparent annotation, well formed); None: the run is a root."""

    @property
    def trace_id(self) -> int:
        return self.parent.trace_id if self.parent is not None else run_trace_id(self.uid)


def traced_run(metadata: Mapping[str, Any], *, workflow: str, trigger: str) -> TracedRun:
    """A run's trace identity from its metadata; a towline.dev/traceparent that is not a version-00 traceparent is
    ignored (the run is then a root): whoever may create the run may name any trace, which only ever joins it."""
    annotation = (metadata.get("annotations") or {}).get(TRACEPARENT_ANNOTATION)
    return TracedRun(str(metadata["uid"]), str(metadata["name"]), str(metadata["namespace"]), workflow, trigger,
                     parse_traceparent(annotation if isinstance(annotation, str) else None))


def _id(size: int, *parts: str) -> int:
    digest = hashlib.sha256("\0".join(("towline-trace", *parts)).encode()).digest()
    return int.from_bytes(digest[:size], "big") or 1  # an all-zero id is invalid


def run_trace_id(uid: str) -> int:
    """The trace of a run nothing upstream traced."""
    return _id(16, "trace", uid)


def run_span_id(uid: str) -> int:
    return _id(8, "run", uid)


def attempt_span_id(uid: str, step_id: str, attempt: int) -> int:
    """The span of one attempt of a step (or loop instance): its Job's TRACEPARENT names it before it ends."""
    return _id(8, "attempt", uid, step_id, str(attempt))


def approval_span_id(uid: str, step_id: str) -> int:
    return _id(8, "approval", uid, step_id)


def attempt_traceparent(run: TracedRun, step_id: str, attempt: int) -> str:
    """TRACEPARENT for an attempt's containers: the attempt's own span, sampled."""
    return TraceParent(run.trace_id, attempt_span_id(run.uid, step_id, attempt)).header()


def finished_spans(run: TracedRun, before: WorkflowRunStatus, after: WorkflowRunStatus,
                   *, created_at: datetime | None = None) -> list[SpanRecord]:
    """The spans the write of `after` over `before` ends: attempts newly in a step's history, approval waits newly
    over, and the run's own span once it is over (from status.startedAt, else `created_at`)."""
    actions = step_actions(after)
    earlier = {entry.id: entry for entry in before.steps}
    spans = [span for entry in after.steps for span in _step_spans(run, earlier.get(entry.id), entry, actions)]
    if after.phase in TERMINAL_RUN_PHASES and before.phase not in TERMINAL_RUN_PHASES:
        start = after.started_at or created_at
        if start is not None and after.finished_at is not None:
            spans.append(_run_span(run, after, start, after.finished_at))
    return spans


def _step_spans(run: TracedRun, before: StepStatus | None, entry: StepStatus, actions: dict[str, str],
                ) -> Iterator[SpanRecord]:
    ended = {(record.attempt, record.job_name) for record in (before.history if before is not None else ())}
    for record in entry.history:
        if (record.attempt, record.job_name) in ended or record.started_at is None or record.finished_at is None:
            continue
        attributes: dict[str, AttributeValue] = {
            **_run_attributes(run), "towline.step.id": entry.id, "towline.step.attempt": record.attempt,
            "towline.step.attempt_group": entry.attempt_group,
        }
        action = actions.get(entry.id) or actions.get(loop_of(entry.id) or "")
        if action:
            attributes["towline.step.action"] = action
        if record.error_class is not None:
            attributes["towline.step.error_class"] = str(record.error_class)
        if record.image:
            attributes["towline.step.image"] = record.image
        if record.job_name:
            attributes["k8s.job.name"] = record.job_name
        span_id = attempt_span_id(run.uid, entry.id, record.attempt)
        yield SpanRecord(
            name=f"step {entry.id}", trace_id=run.trace_id, span_id=span_id, parent_span_id=run_span_id(run.uid),
            start=record.started_at, end=max(record.finished_at, record.started_at), attributes=attributes,
            error=record.error_class is not None,
        )
    was_over = before is not None and before.phase in TERMINAL_STEP_PHASES
    if (entry.approval_name is not None and entry.phase in TERMINAL_STEP_PHASES and not was_over
            and entry.started_at is not None and entry.finished_at is not None):
        yield SpanRecord(
            name=f"approval {entry.id}", trace_id=run.trace_id, span_id=approval_span_id(run.uid, entry.id),
            parent_span_id=run_span_id(run.uid), start=entry.started_at,
            end=max(entry.finished_at, entry.started_at),
            attributes={**_run_attributes(run), "towline.step.id": entry.id, "towline.approval.outcome":
                        entry.reason or entry.phase, "k8s.approval.name": entry.approval_name},
            error=entry.phase != "Succeeded",
        )


def _run_span(run: TracedRun, status: WorkflowRunStatus, start: datetime, end: datetime) -> SpanRecord:
    return SpanRecord(
        name=f"run {run.workflow}", trace_id=run.trace_id, span_id=run_span_id(run.uid),
        parent_span_id=run.parent.span_id if run.parent is not None else None, start=start, end=max(end, start),
        attributes={**_run_attributes(run), "towline.run.uid": run.uid, "towline.run.trigger": run.trigger,
                    "towline.run.phase": status.phase},
        error=status.phase != "Succeeded", remote_parent=run.parent is not None,
    )


def _run_attributes(run: TracedRun) -> dict[str, AttributeValue]:
    return {"k8s.namespace.name": run.namespace, "towline.workflow": run.workflow, "towline.run.name": run.name}


def step_actions(status: WorkflowRunStatus) -> dict[str, str]:
    """Each step's action as the run's snapshot names it (no entry: an approval, wait or subflow step)."""
    snapshot = status.workflow_spec
    if snapshot is None:
        return {}
    return {step.id: step.action for step in (*snapshot.steps, *snapshot.finally_, *snapshot.compensations)
            if step.action}
