"""The archive benchmark's account of a run's end and its release by the archive (the lag and the backlog)."""

from __future__ import annotations

from typing import Any

from tests.bench.bench_archive_kwok import Releases

from towline.k8s.labels import RUN_ARCHIVE_FINALIZER


def _run(name: str, phase: str, *, held: bool) -> dict[str, Any]:
    finalizers = [RUN_ARCHIVE_FINALIZER, "towline.dev/other"] if held else ["towline.dev/other"]
    return {"metadata": {"name": name, "finalizers": finalizers}, "status": {"phase": phase}}


def test_a_run_is_released_when_seen_ended_without_the_archives_finalizer_and_its_lag_is_the_gap() -> None:
    now = [10.0]
    releases = Releases(expected=2, clock=lambda: now[0])
    releases.saw_run(_run("a", "Running", held=True))
    releases.saw_run(_run("a", "Succeeded", held=True))
    now[0] = 10.5
    releases.saw_run(_run("b", "Failed", held=True))
    now[0] = 12.0
    releases.saw_run(_run("a", "Succeeded", held=False))
    assert releases.lags() == [2.0]
    assert releases.awaiting_at(11.0) == 2
    assert releases.awaiting_at(12.0) == 1  # a released at 12.0 no longer awaits
    assert not releases.drained.is_set()
    now[0] = 13.0
    releases.saw_run(_run("b", "Failed", held=False))
    assert releases.drained.is_set()
    assert sorted(releases.lags()) == [2.0, 2.5]


def test_a_running_run_without_the_finalizer_is_not_counted_released() -> None:
    releases = Releases(expected=1, clock=lambda: 1.0)
    releases.saw_run(_run("a", "Running", held=False))  # the operator has not added it yet
    assert releases.released == {} and releases.ended == {}
