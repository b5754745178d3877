"""What the operator remembers of a run for the run dead letters' gauges (runtime.runstore.RunSummary): whether it
failed before its first step and since when, how it was started, and which failed run it replays."""

from __future__ import annotations

from typing import Any

from towline.runtime.runstore import RunSummary
from towline_connectors.wire import parse_rfc3339


def run(phase: str, steps: list[dict[str, Any]], *, trigger: str = "webhook",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "r", "namespace": "team", "creationTimestamp": "2026-12-07T08:00:00Z",
                         "annotations": annotations or {}},
            "spec": {"workflowRef": {"name": "orders"}, "trigger": {"type": trigger}},
            "status": {"phase": phase, "finishedAt": "2026-12-07T08:00:03Z", "steps": steps}}


def test_a_run_refused_before_its_first_step_is_a_letter_since_it_failed() -> None:
    summary = RunSummary.of(run("Failed", [{"id": "a", "phase": "Pending"}]))
    assert summary.letter_since == parse_rfc3339("2026-12-07T08:00:03Z").timestamp()
    assert (summary.name, summary.trigger, summary.replays) == ("r", "webhook", None)


def test_a_run_whose_step_started_or_that_did_not_fail_is_no_letter() -> None:
    assert RunSummary.of(run("Failed", [{"id": "a", "phase": "Failed", "attempt": 1}])).letter_since is None
    assert RunSummary.of(run("Succeeded", [])).letter_since is None
    assert RunSummary.of(run("Failed", [], trigger="parent")).letter_since is None, "a subflow's child"


def test_a_replay_names_the_run_it_replays_and_nothing_else_counts() -> None:
    replay = run("Running", [], annotations={"towline.dev/replay-of": "workflowruns/early-1",
                                             "towline.dev/replayed-by": "alice"})
    assert RunSummary.of(replay).replays == "early-1"
    delivery = run("Running", [], annotations={"towline.dev/replay-of": "deliveries/abc"})
    assert RunSummary.of(delivery).replays is None
