"""Isolation failures are reported per namespace once they keep happening, never one Event per attempt."""

from __future__ import annotations

from towline.k8s.isolationreports import IsolationFailureReports


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_report_once_failures_keep_coming_then_quiet_for_the_window() -> None:
    clock = Clock()
    reports = IsolationFailureReports(threshold=3, window_seconds=600, clock=clock)
    outcomes = []
    for _ in range(50):  # an attempt storm
        outcomes.append(reports.record("team-a"))
        clock.now += 5
    sent = [o for o in outcomes if o is not None]
    assert len(sent) == 1 and outcomes[2] is not None
    assert "3 step attempts in namespace team-a" in sent[0] and "egress.requireIsolation" in sent[0]
    clock.now = 1000 + 2 * 5 + 600  # a window after the report (the third attempt)
    assert reports.record("team-a") is not None, "still failing a window later: reported again"


def test_scattered_failures_below_the_threshold_are_never_reported() -> None:
    clock = Clock()
    reports = IsolationFailureReports(threshold=3, window_seconds=600, clock=clock)
    for _ in range(10):
        assert reports.record("team-a") is None
        clock.now += 400  # at most two within any window


def test_namespaces_are_counted_apart() -> None:
    clock = Clock()
    reports = IsolationFailureReports(threshold=2, window_seconds=600, clock=clock)
    assert reports.record("team-a") is None
    assert reports.record("team-b") is None
    assert reports.record("team-a") is not None
    assert reports.record("team-b") is not None
