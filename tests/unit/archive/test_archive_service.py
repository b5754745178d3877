"""The archive's follower and writer over a real SQLite store and an API that answers log reads and finalizer
patches: each record once, a run after its logs and approvals, its finalizer released last (and again after a
conflict), a run that still has a running pod waited for."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from towline.archive.service import POD_WAIT_SECONDS, ArchiveService
from towline.archive.store import ArchiveStore, open_store
from towline.k8s.client import Conflict
from towline.k8s.labels import RUN_ARCHIVE_FINALIZER

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
NS = "ops"


class Api:
    """Log reads and run patches, recorded; a patch may be made to conflict once."""

    def __init__(self) -> None:
        self.log_reads: list[tuple[str, str]] = []
        self.patches: list[tuple[str, Any]] = []
        self.conflict_once = False
        self.current: dict[str, Any] = {}

    async def read_text(self, path: str, *, query: dict[str, str] | None = None) -> str:
        assert query is not None
        self.log_reads.append((path, query["container"]))
        return f"{query['container']} says hello\n"

    async def merge_patch(self, path: str, patch: Any) -> Any:
        if self.conflict_once:
            self.conflict_once = False
            raise Conflict(409, "the object has been modified")
        self.patches.append((path, patch))
        return {}

    async def get(self, path: str) -> Any:
        return self.current


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ArchiveStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'archive.db'}", now=NOW)
    yield opened
    opened.close()


def run(phase: str = "Succeeded", version: str = "7") -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
            "metadata": {"name": "deploy-1", "namespace": NS, "uid": "u-run", "resourceVersion": version,
                         "finalizers": [RUN_ARCHIVE_FINALIZER], "creationTimestamp": "2026-12-06T11:00:00Z"},
            "spec": {"workflowRef": {"name": "deploy"}, "requestedBy": "carol"},
            "status": {"phase": phase, "startedAt": "2026-12-06T11:00:00Z",
                       **({"finishedAt": "2026-12-06T11:59:00Z"} if phase == "Succeeded" else {})}}


def pod(phase: str = "Succeeded") -> dict[str, Any]:
    return {"metadata": {"name": "towline-step-deploy-1-apply-1", "namespace": NS, "uid": "u-pod",
                         "labels": {"towline.dev/run": "deploy-1", "towline.dev/step": "apply",
                                    "towline.dev/attempt": "1", "towline.dev/step-pod": "true"}},
            "spec": {"containers": [{"name": "step"}]}, "status": {"phase": phase}}


def approval() -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Approval",
            "metadata": {"name": "deploy-1-review", "namespace": NS, "uid": "u-appr",
                         "ownerReferences": [{"kind": "WorkflowRun", "name": "deploy-1", "uid": "u-run"}]},
            "spec": {"runName": "deploy-1", "step": "review", "decision": "Approved", "decidedBy": "bob",
                     "reason": "change 4711"},
            "status": {"phase": "Approved"}}


def service(store: ArchiveStore, api: Api, now: datetime = NOW) -> ArchiveService:
    return ArchiveService(api, store, clock=lambda: now)  # type: ignore[arg-type]


def drain(archive: ArchiveService) -> None:
    async def writes() -> None:
        while archive.state.pending:
            item = next(iter(archive.state.pending))
            del archive.state.pending[item]
            if not await archive.write(*item):
                return

    asyncio.run(writes())


def test_a_pods_log_is_archived_once_and_the_run_after_it_with_its_digest_then_released(store: ArchiveStore) -> None:
    api = Api()
    archive = service(store, api)
    archive.on_run("ADDED", run("Running"))
    archive.on_pod("ADDED", pod())
    archive.on_approval("ADDED", approval())
    drain(archive)
    archive.on_pod("MODIFIED", pod())  # the same ended pod again (a re-list): no second read
    drain(archive)
    assert len(api.log_reads) == 1
    logs = store.logs(NS, "u-run")
    assert [(entry.body["container"], entry.body["text"]) for entry in logs] == [("step", "step says hello\n")]
    assert [entry.body["approval"]["spec"]["decidedBy"] for entry in store.approvals(NS, "u-run")] == ["bob"]
    assert api.patches == [], "a running run is not released"
    archive.on_run("MODIFIED", run())
    drain(archive)
    archived = store.run(NS, "u-run")
    assert archived is not None and archived.phase == "Succeeded"
    assert [ref["digest"] for ref in archived.entry.body["logs"]] == [logs[0].digest]
    assert api.patches == [("/apis/towline.dev/v1alpha1/namespaces/ops/workflowruns/deploy-1",
                            {"metadata": {"resourceVersion": "7", "finalizers": []}})]
    assert archive.written == {"log": 1, "approval": 1, "run": 1}
    archive.on_run("MODIFIED", run(version="8"))  # seen again after a restart: released, nothing written twice
    drain(archive)
    assert archive.written == {"log": 1, "approval": 1, "run": 1}
    assert len(api.patches) == 2 and len(api.log_reads) == 1


def test_a_finished_run_waits_for_a_pod_that_has_not_ended_then_goes_without_it(store: ArchiveStore) -> None:
    api = Api()
    archive = service(store, api, NOW - timedelta(seconds=30))  # half a minute after the run ended (11:59)
    archive.on_pod("ADDED", pod("Running"))
    archive.on_run("ADDED", run())
    assert not asyncio.run(archive.write("run", NS, "deploy-1"))
    assert store.run(NS, "u-run") is None and api.patches == []
    late = service(store, api, NOW + timedelta(seconds=POD_WAIT_SECONDS))
    late.on_pod("ADDED", pod("Running"))
    late.on_run("ADDED", run())
    assert asyncio.run(late.write("run", NS, "deploy-1"))
    archived = store.run(NS, "u-run")
    assert archived is not None and archived.entry.body["logs"] == []


def test_a_release_that_conflicts_is_made_again_on_the_run_as_it_is_now(store: ArchiveStore) -> None:
    api = Api()
    api.conflict_once = True
    api.current = run(version="9")
    archive = service(store, api)
    archive.on_run("ADDED", run())
    drain(archive)
    assert api.patches == [("/apis/towline.dev/v1alpha1/namespaces/ops/workflowruns/deploy-1",
                            {"metadata": {"resourceVersion": "9", "finalizers": []}})]
