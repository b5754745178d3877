"""A run's spans: one per finished attempt and approval wait, and the run's, each emitted by the write that ends it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine_harness import Sim, action, workflow

from towline.api.run import WorkflowRunStatus
from towline.api.spans import SpanRecord
from towline.engine.traces import (
    TracedRun,
    attempt_span_id,
    attempt_traceparent,
    finished_spans,
    run_span_id,
    run_trace_id,
    traced_run,
)
from towline_step.protocol import parse_traceparent

CANARY = "canary-value-7f3a9e"
RETRY = {"limit": 3, "backoff": "fixed", "baseDelaySeconds": 10}
INGRESS = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def run_of(sim: Sim, annotation: str | None = None) -> TracedRun:
    metadata: dict[str, Any] = {"uid": sim.uid, "name": sim.name, "namespace": "sales-ops"}
    if annotation is not None:
        metadata["annotations"] = {"towline.dev/traceparent": annotation}
    return traced_run(metadata, workflow="renewal-watch", trigger="webhook")


def reconcile_traced(sim: Sim, run: TracedRun, emitted: list[SpanRecord]) -> None:
    before = sim.status
    sim.reconcile()
    emitted.extend(finished_spans(run, before, sim.status, created_at=sim.now))


def retried_then_approved(annotation: str | None = INGRESS) -> tuple[Sim, TracedRun, list[SpanRecord]]:
    """load fails once (transient, its message and inputs carrying the canary), succeeds, then review is approved."""
    sim = Sim(workflow([
        action("load", retry=RETRY, **{"with": {"url": f"https://crm.example.com/?q={CANARY}"}}),
        {"id": "review", "needs": ["load"], "approval": {"approvers": {"users": ["bob"]}}},
    ]))
    run, emitted = run_of(sim, annotation), []
    reconcile_traced(sim, run, emitted)
    sim.advance(3)
    sim.fail("load", "transient", message=f"upstream said {CANARY}")
    reconcile_traced(sim, run, emitted)
    sim.advance(10)
    reconcile_traced(sim, run, emitted)
    sim.advance(4)
    sim.finish("load", output={"token": CANARY})
    reconcile_traced(sim, run, emitted)
    reconcile_traced(sim, run, emitted)
    sim.advance(60)
    sim.decide_approval("review", "Approved")
    reconcile_traced(sim, run, emitted)
    reconcile_traced(sim, run, emitted)
    assert sim.phase == "Succeeded"
    return sim, run, emitted


def test_each_attempt_approval_and_the_run_is_one_span_emitted_once() -> None:
    _, _, emitted = retried_then_approved()
    assert sorted(span.name for span in emitted) == ["approval review", "run renewal-watch", "step load", "step load"]
    assert len({span.span_id for span in emitted}) == 4


def test_spans_form_one_tree_under_the_ingress_delivery() -> None:
    sim, _, emitted = retried_then_approved()
    ingress = parse_traceparent(INGRESS)
    assert ingress is not None
    assert {span.trace_id for span in emitted} == {ingress.trace_id}
    root = next(span for span in emitted if span.name.startswith("run "))
    assert (root.parent_span_id, root.remote_parent) == (ingress.span_id, True)
    assert all(span.parent_span_id == root.span_id for span in emitted if span is not root)
    assert root.span_id == run_span_id(sim.uid)


def test_span_times_are_the_run_status_times() -> None:
    sim, _, emitted = retried_then_approved()
    load = sim.step("load")
    attempts = sorted((span for span in emitted if span.name == "step load"), key=lambda s: s.start)
    assert [(span.start, span.end) for span in attempts] == [(r.started_at, r.finished_at) for r in load.history]
    assert attempts[1].start - attempts[0].end == timedelta(seconds=10)
    review = sim.step("review")
    approval = next(span for span in emitted if span.name == "approval review")
    assert (approval.start, approval.end) == (review.started_at, review.finished_at)
    root = next(span for span in emitted if span.name.startswith("run "))
    assert (root.start, root.end) == (sim.status.started_at, sim.status.finished_at)


def test_attempt_span_attributes_name_the_step_never_its_values() -> None:
    _, _, emitted = retried_then_approved()
    first, second = sorted((span for span in emitted if span.name == "step load"), key=lambda s: s.start)
    assert first.attributes["towline.step.attempt"] == 1 and first.error
    assert first.attributes["towline.step.error_class"] == "transient"
    assert first.attributes["towline.step.action"] == "http.request"
    assert second.attributes["towline.step.attempt"] == 2 and not second.error
    assert all(CANARY not in f"{span.name}{span.attributes}" for span in emitted)


def test_an_attempt_span_id_is_the_one_its_job_was_told() -> None:
    sim, run, emitted = retried_then_approved()
    for span in emitted:
        if span.name == "step load":
            told = parse_traceparent(attempt_traceparent(run, "load", int(span.attributes["towline.step.attempt"])))
            assert told is not None and (told.trace_id, told.span_id) == (span.trace_id, span.span_id)
            assert span.span_id == attempt_span_id(sim.uid, "load", int(span.attributes["towline.step.attempt"]))


def test_a_restarted_operator_emits_nothing_already_written() -> None:
    sim, run, _ = retried_then_approved()
    assert finished_spans(run, sim.status, sim.status) == []


def test_a_lost_write_emits_from_the_next_pass_with_the_same_ids() -> None:
    """A pass whose write lost emits nothing; the pass that writes derives the same spans from status."""
    sim = Sim(workflow([action("load")]))
    run = run_of(sim, None)
    sim.reconcile()
    before = sim.status
    sim.finish("load")
    sim.reconcile(persist=False)
    lost = finished_spans(run, before, sim.last.status)
    sim.reconcile()
    written = finished_spans(run, before, sim.status)
    assert [(s.span_id, s.start, s.end) for s in lost] == [(s.span_id, s.start, s.end) for s in written]


def test_a_run_nothing_traced_is_a_root_of_its_own_trace() -> None:
    _, run, emitted = retried_then_approved(annotation=None)
    root = next(span for span in emitted if span.name.startswith("run "))
    assert root.parent_span_id is None
    assert {span.trace_id for span in emitted} == {run_trace_id(run.uid)}


def test_a_malformed_traceparent_annotation_is_ignored() -> None:
    for forged in ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                   INGRESS.upper(), INGRESS + "-extra", f" {INGRESS}", "x" * 4096):
        run = traced_run({"uid": "u", "name": "n", "namespace": "ns", "annotations":
                          {"towline.dev/traceparent": forged}}, workflow="w", trigger="manual")
        assert run.parent is None and run.trace_id == run_trace_id("u")


def test_no_span_before_anything_ended() -> None:
    sim = Sim(workflow([action("load")]))
    run = run_of(sim)
    before = WorkflowRunStatus()
    sim.reconcile()
    assert finished_spans(run, before, sim.status) == []
