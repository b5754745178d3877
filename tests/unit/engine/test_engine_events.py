"""The CloudEvents a run's status writes announce: each phase change once, ids derived from the transition, no value."""

from __future__ import annotations

import json

from engine_harness import Sim, action, workflow

from towline.api.events import EventRecord
from towline.engine.events import event_source, run_events
from towline.engine.traces import TracedRun, traced_run

CANARY = "canary-value-2c9e41"
RETRY = {"limit": 3, "backoff": "fixed", "baseDelaySeconds": 10}


def run_of(sim: Sim) -> TracedRun:
    return traced_run({"uid": sim.uid, "name": sim.name, "namespace": "sales-ops"}, workflow="renewal-watch",
                      trigger="webhook")


def reconcile(sim: Sim, run: TracedRun, emitted: list[EventRecord]) -> None:
    before = sim.status
    sim.reconcile()
    emitted.extend(run_events(run, before, sim.status, sim.now))


def retried_then_approved() -> tuple[Sim, TracedRun, list[EventRecord]]:
    """load fails once (its message, inputs and later output carry the canary), succeeds, review is approved."""
    sim = Sim(workflow([
        action("load", retry=RETRY, **{"with": {"url": f"https://crm.example.com/?q={CANARY}"}}),
        {"id": "review", "needs": ["load"], "approval": {"approvers": {"users": ["bob"]}}},
    ]))
    run, emitted = run_of(sim), []
    reconcile(sim, run, emitted)
    sim.advance(3)
    sim.fail("load", "transient", message=f"upstream said {CANARY}")
    reconcile(sim, run, emitted)
    sim.advance(10)
    reconcile(sim, run, emitted)
    sim.advance(4)
    sim.finish("load", output={"token": CANARY})
    reconcile(sim, run, emitted)
    reconcile(sim, run, emitted)
    sim.advance(60)
    sim.decide_approval("review", "Approved")
    reconcile(sim, run, emitted)
    reconcile(sim, run, emitted)
    assert sim.phase == "Succeeded"
    return sim, run, emitted


def test_a_retried_step_and_an_approval_announce_each_change_once() -> None:
    _, _, emitted = retried_then_approved()
    assert [event.type for event in emitted if event.type.startswith("dev.towline.step.")] == [
        "dev.towline.step.running", "dev.towline.step.retrying", "dev.towline.step.running",
        "dev.towline.step.succeeded", "dev.towline.step.running", "dev.towline.step.succeeded"]
    assert [event.type for event in emitted if event.type.startswith("dev.towline.approval.")] == [
        "dev.towline.approval.requested", "dev.towline.approval.decided"]
    assert emitted[0].type == "dev.towline.run.running", "a run starts before its steps"
    assert emitted[-1].type == "dev.towline.run.succeeded", "and ends after them"
    assert len({event.id for event in emitted}) == len(emitted)


def test_the_attempts_and_the_decision_are_in_the_data() -> None:
    _, _, emitted = retried_then_approved()
    load = [event.data for event in emitted if event.data.get("step") == "load" and event.type.startswith(
        "dev.towline.step.")]
    assert [(data["phase"], data["attempt"], data["errorClass"]) for data in load] == [
        ("Running", 1, None), ("Retrying", 1, "transient"), ("Running", 2, None), ("Succeeded", 2, None)]
    assert {data["action"] for data in load} == {"http.request"}
    decided = next(event for event in emitted if event.type == "dev.towline.approval.decided")
    assert decided.data["decidedBy"] is not None and decided.data["phase"] == "Succeeded"
    assert decided.subject == f"approvals/{decided.data['approval']}"
    assert decided.source == event_source("sales-ops", "renewal-watch")
    assert decided.source == "/namespaces/sales-ops/workflows/renewal-watch"


def test_the_same_transition_derived_again_is_the_same_event_and_a_written_one_is_none() -> None:
    sim = Sim(workflow([action("load", retry=RETRY)]))
    run = run_of(sim)
    before = sim.status
    sim.reconcile()
    first = run_events(run, before, sim.status, sim.now)
    sim.advance(30)  # another process (or this one after a restart) derives the same write later
    again = run_events(run, before, sim.status, sim.now)
    assert first and [event.id for event in again] == [event.id for event in first]
    assert run_events(run, sim.status, sim.status, sim.now) == [], "a restarted operator reads it written: nothing"
    other = traced_run({"uid": "another-uid", "name": sim.name, "namespace": "sales-ops"}, workflow="renewal-watch",
                       trigger="webhook")
    assert {event.id for event in run_events(other, before, sim.status, sim.now)}.isdisjoint(
        {event.id for event in first}), "another run's events never share an id"


def test_no_input_output_message_or_param_value_is_ever_in_an_event() -> None:
    _, _, emitted = retried_then_approved()
    for event in emitted:
        assert CANARY not in event.body().decode()
        assert set(event.document()) == {"specversion", "id", "type", "source", "subject", "time",
                                         "datacontenttype", "data"}
        assert json.loads(event.body())["specversion"] == "1.0"
