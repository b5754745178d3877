"""What the archive's streams showed, kept by run in indexed stores: a run's step pods and Approvals are found by the
run they belong to now, and what went leaves nothing behind (the follower keeps what it is given, nothing more)."""

from __future__ import annotations

from typing import Any

from towline.archive.pending import APPROVALS_BY_RUN, PODS_BY_RUN
from towline.archive.service import ArchiveService
from towline.k8s.labels import LABEL_RUN

NS = "ops"


def follower() -> ArchiveService:
    return ArchiveService(api=None, store=None)  # type: ignore[arg-type] # only the streams' sinks are used


def pod(name: str, run: str) -> dict[str, Any]:
    return {"metadata": {"namespace": NS, "name": name, "uid": f"u-{name}", "labels": {LABEL_RUN: run}},
            "status": {"phase": "Running"}}


def approval(name: str, run: str) -> dict[str, Any]:
    return {"metadata": {"namespace": NS, "name": name, "uid": f"u-{name}"}, "spec": {"runName": run}}


def names(found: list[tuple[tuple[str, str], dict[str, Any]]]) -> list[str]:
    return [key[1] for key, _ in found]


def test_pods_and_approvals_that_went_leave_nothing_behind() -> None:
    archive = follower()
    for number in range(50):
        archive.on_pod("ADDED", pod(f"p{number}", f"run-{number}"))
        archive.on_approval("ADDED", approval(f"a{number}", f"run-{number}"))
    assert names(archive.state.pods.by(PODS_BY_RUN, (NS, "run-7"))) == ["p7"]
    for number in range(50):
        archive.on_pod("DELETED", pod(f"p{number}", f"run-{number}"))
        archive.on_approval("DELETED", approval(f"a{number}", f"run-{number}"))
    assert len(archive.state.pods) == 0 and len(archive.state.approvals) == 0
    assert archive.state.pods.by(PODS_BY_RUN, (NS, "run-7")) == []
    assert [filed for _, filed in archive.state.pods._indexes.values()] == [{}], "no empty entry per run"
    assert [filed for _, filed in archive.state.approvals._indexes.values()] == [{}], "no empty entry per run"


def test_a_pod_relabelled_to_another_run_is_that_runs_only() -> None:
    archive = follower()
    archive.on_pod("ADDED", pod("p1", "run-1"))
    archive.on_pod("MODIFIED", pod("p1", "run-2"))
    assert archive.state.pods.by(PODS_BY_RUN, (NS, "run-1")) == [], "its first run's record must not take it"
    assert names(archive.state.pods.by(PODS_BY_RUN, (NS, "run-2"))) == ["p1"]
    archive.on_approval("ADDED", approval("a1", "run-1"))
    archive.on_approval("MODIFIED", approval("a1", "run-2"))
    assert archive.state.approvals.by(APPROVALS_BY_RUN, (NS, "run-1")) == []
    assert names(archive.state.approvals.by(APPROVALS_BY_RUN, (NS, "run-2"))) == ["a1"]
