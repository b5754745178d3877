"""The chaos scenario's invariants can fail: each broken one is named in `violations()`."""

from __future__ import annotations

from typing import Any

from tests.chaos.report import ChaosReport
from tests.chaos.scenario import ChaosSettings

from towline_dev.node.idempotencysink import SinkCounts

SETTINGS = ChaosSettings(runs=2, kills=0, pauses=0, seed=7)


def run(name: str, phase: str, attempts: tuple[int, int] = (1, 1)) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase, "steps": [
        {"id": "first", "attempt": attempts[0]}, {"id": "second", "attempt": attempts[1]}]}}


def report(**changes: Any) -> ChaosReport:
    fields: dict[str, Any] = {
        "settings": SETTINGS, "seconds": 10.0, "operator_cpu": 1.0, "happened": [],
        "runs": {"r1": run("r1", "Succeeded"), "r2": run("r2", "Succeeded")}, "created": 2,
        "jobs_per_attempt": {(r, s, "1"): 1 for r in ("r1", "r2") for s in ("first", "second")},
        "sink": SinkCounts(requests=4, keys=4, duplicates=0, lost_replies=0, without_key=0,
                           applied_per_step={(r, s): 1 for r in ("r1", "r2") for s in ("first", "second")},
                           arrivals_per_step={(r, s): 1 for r in ("r1", "r2") for s in ("first", "second")}),
        "watch_reconnects": 0, "operators_running": True, "operator_exits": [],
    }
    fields.update(changes)
    return ChaosReport(**fields)


def test_a_clean_scenario_has_no_violations_and_prints_its_counts() -> None:
    clean = report()
    assert clean.violations() == []
    assert "| runs created" in clean.table() and "| finished Succeeded" in clean.table()


def test_a_run_that_never_finished_is_lost() -> None:
    lost = report(runs={"r1": run("r1", "Running"), "r2": run("r2", "Succeeded")})
    assert lost.lost == ["r1"]
    assert any("1 runs lost" in line for line in lost.violations())


def test_a_second_job_for_one_attempt_is_a_violation() -> None:
    jobs = {(r, s, "1"): 1 for r in ("r1", "r2") for s in ("first", "second")} | {("r1", "first", "1"): 2}
    assert any("more than one Job" in line for line in report(jobs_per_attempt=jobs).violations())


def test_a_step_applied_under_two_keys_is_a_violation() -> None:
    base = report().sink
    twice = SinkCounts(**{**base.__dict__, "applied_per_step": {**base.applied_per_step, ("r2", "second"): 2}})
    assert any("applied more than once" in line for line in report(sink=twice).violations())


def test_more_calls_than_jobs_means_an_attempt_ran_twice() -> None:
    base = report().sink
    extra = SinkCounts(**{**base.__dict__, "arrivals_per_step": {**base.arrivals_per_step, ("r1", "first"): 2}})
    assert any("more often than they had Jobs" in line for line in report(sink=extra).violations())


def test_a_job_the_run_does_not_record_is_a_violation() -> None:
    jobs = {(r, s, "1"): 1 for r in ("r1", "r2") for s in ("first", "second")} | {("r2", "second", "2"): 1}
    assert report(jobs_per_attempt=jobs).jobs_unaccounted_for() == [
        "r2/second: Jobs for attempts [1, 2], status records [1]"]


def test_a_failed_run_is_a_violation_with_its_message() -> None:
    failed = run("r2", "Failed") | {"status": {"phase": "Failed", "message": "step first failed", "steps": []}}
    assert "run r2 Failed: step first failed" in report(runs={"r1": run("r1", "Succeeded"), "r2": failed}).violations()
