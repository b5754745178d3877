"""A step whose pod never became isolated is retried as transient and flagged for a namespace report."""

from __future__ import annotations

from engine_harness import Sim, action, workflow

from towline.engine.steps import EGRESS_ISOLATION_MISSING
from towline_connectors.wire import EGRESS_NOT_ISOLATED_MESSAGE

RETRY = {"limit": 3, "baseDelaySeconds": 10, "maxDelaySeconds": 300}


def test_an_isolation_failure_is_retried_and_asks_for_the_report() -> None:
    sim = Sim(workflow([action("a", retry=RETRY)]))
    sim.reconcile()
    sim.fail("a", "transient", EGRESS_NOT_ISOLATED_MESSAGE)
    sim.reconcile()
    assert sim.step("a").phase == "Retrying"
    (event,) = sim.events(EGRESS_ISOLATION_MISSING)
    assert event.type == "Warning" and EGRESS_NOT_ISOLATED_MESSAGE in event.message


def test_other_transient_failures_do_not() -> None:
    sim = Sim(workflow([action("a", retry=RETRY)]))
    sim.reconcile()
    sim.fail("a", "transient", "connection reset by the provider")
    sim.reconcile()
    assert sim.events(EGRESS_ISOLATION_MISSING) == []
