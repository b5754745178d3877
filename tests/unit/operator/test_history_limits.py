"""Which finished runs a workflow's history limits delete: the oldest beyond the newest N of each outcome."""

from __future__ import annotations

from towline.api.webhooks import WebhookVerification
from towline.api.workflow import HistoryLimits
from towline.handlers.history import WEBHOOK_REPLAY_WINDOW, FinishedRun, kept_until, runs_beyond_limits


def run(name: str, phase: str, finished_at: str) -> FinishedRun:
    return FinishedRun(name, phase, finished_at)


def names(runs: list[FinishedRun]) -> list[str]:
    return sorted(r.name for r in runs)


def test_the_newest_of_each_outcome_are_kept() -> None:
    runs = [run("s1", "Succeeded", "2026-01-01T00:00:01Z"), run("s2", "Succeeded", "2026-01-01T00:00:02Z"),
            run("s3", "Succeeded", "2026-01-01T00:00:03Z"), run("f1", "Failed", "2026-01-01T00:00:04Z"),
            run("f2", "Failed", "2026-01-01T00:00:05Z")]
    assert names(runs_beyond_limits(runs, HistoryLimits(succeeded=2, failed=1))) == ["f1", "s1"]


def test_within_the_limits_nothing_is_deleted() -> None:
    runs = [run("s1", "Succeeded", "2026-01-01T00:00:01Z"), run("f1", "Failed", "2026-01-01T00:00:02Z")]
    assert runs_beyond_limits(runs, HistoryLimits()) == []


def test_a_limit_of_zero_deletes_every_run_of_that_outcome() -> None:
    runs = [run("s1", "Succeeded", "2026-01-01T00:00:01Z"), run("f1", "Failed", "2026-01-01T00:00:02Z")]
    assert names(runs_beyond_limits(runs, HistoryLimits(succeeded=0, failed=5))) == ["s1"]


def test_cancelled_runs_are_not_counted_or_deleted() -> None:
    runs = [run("c1", "Cancelled", "2026-01-01T00:00:01Z"), run("s1", "Succeeded", "2026-01-01T00:00:02Z")]
    assert runs_beyond_limits(runs, HistoryLimits(succeeded=0, failed=0)) == [runs[1]]


def test_a_run_without_a_finish_time_counts_as_the_oldest() -> None:
    runs = [run("unknown", "Succeeded", ""), run("s1", "Succeeded", "2026-01-01T00:00:01Z")]
    assert names(runs_beyond_limits(runs, HistoryLimits(succeeded=1))) == ["unknown"]


def test_a_webhook_run_is_kept_through_the_replay_window_whatever_the_limits() -> None:
    """The run is the record that its delivery happened: pruned inside the window, a replay would start another."""
    created = "2026-01-01T00:00:00Z"
    webhook = FinishedRun("hook", "Succeeded", "2026-01-01T00:00:05Z", kept_until(created, webhook=True))
    manual = FinishedRun("manual", "Succeeded", "2026-01-01T00:00:06Z", kept_until(created, webhook=False))
    limits = HistoryLimits(succeeded=0)
    assert names(runs_beyond_limits([webhook, manual], limits, "2026-01-01T00:59:59Z")) == ["manual"]
    assert names(runs_beyond_limits([webhook, manual], limits, "2026-01-01T01:00:00Z")) == ["hook", "manual"]


def test_the_replay_window_covers_the_largest_timestamp_tolerance_a_trigger_may_set() -> None:
    largest = WebhookVerification.model_fields["tolerance_seconds"].metadata
    assert max(m.le for m in largest if hasattr(m, "le")) == WEBHOOK_REPLAY_WINDOW.total_seconds()
