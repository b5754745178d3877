"""The archive's follower and writer over a real SQLite store and an API that answers log reads and finalizer
patches: each record once, a run after its logs and approvals, its finalizer released last (and again after a
conflict), a run that still has a running pod waited for; a step Job's TTL set by one patch once its pod's logs are
written."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from towline.archive.jobttl import job_ttl_patch
from towline.archive.pending import AT_ONCE
from towline.archive.service import POD_WAIT_SECONDS, ArchiveService
from towline.archive.store import ArchiveStore, open_store
from towline.k8s.client import ApiError, Conflict
from towline.k8s.labels import RUN_ARCHIVE_FINALIZER
from towline.k8s.owners import JobRef, controlling_job

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


JOB_PATH = "/apis/batch/v1/namespaces/ops/jobs/towline-step-deploy-1-apply-1"


def job_pod(phase: str = "Succeeded", uid: str = "u-pod") -> dict[str, Any]:
    """A step pod as the operator makes it: controlled by its Job."""
    made = pod(phase)
    made["metadata"]["uid"] = uid
    made["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "controller": True,
                                            "name": "towline-step-deploy-1-apply-1", "uid": "u-job"}]
    return made


class RefusingApi(Api):
    """Answers a Job patch with `status` (a Job gone, or one whose TTL the policy keeps)."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status
        self.job_patches = 0

    async def merge_patch(self, path: str, patch: Any) -> Any:
        if "/jobs/" in path:
            self.job_patches += 1
            raise ApiError(self.status, "refused")
        return await super().merge_patch(path, patch)


def test_a_step_jobs_ttl_is_set_by_one_patch_right_after_its_pods_logs_are_written(store: ArchiveStore) -> None:
    api = Api()
    archive = ArchiveService(api, store, job_ttl_seconds=3600, clock=lambda: NOW)  # type: ignore[arg-type]
    archive.on_run("ADDED", run("Running"))
    archive.on_pod("ADDED", job_pod("Running"))
    drain(archive)
    assert api.patches == [], "no TTL while the pod runs (its log is not in the record)"
    archive.on_pod("MODIFIED", job_pod())
    drain(archive)
    assert len(store.logs(NS, "u-run")) == 1
    assert api.patches == [(JOB_PATH, {"metadata": {"uid": "u-job"}, "spec": {"ttlSecondsAfterFinished": 3600}})]
    archive.on_pod("MODIFIED", job_pod())  # seen again, and the run's record reads the pod's logs once more
    archive.on_run("MODIFIED", run())
    drain(archive)
    assert [path for path, _ in api.patches].count(JOB_PATH) == 1, "one PATCH per step Job"


def test_a_pod_without_a_job_gets_no_patch_and_a_refused_or_missing_job_is_not_tried_again(
    store: ArchiveStore,
) -> None:
    api = Api()
    archive = service(store, api)
    archive.on_run("ADDED", run("Running"))
    archive.on_pod("ADDED", pod())  # no controller reference: nothing to set
    drain(archive)
    assert api.patches == []
    for status in (404, 422, 403):  # gone; a Job an earlier operator made keeps its TTL (the policy refuses)
        refusing = RefusingApi(status)
        archive = service(store, refusing)
        archive.on_run("ADDED", run("Running"))
        archive.on_pod("ADDED", job_pod(uid=f"u-pod-{status}"))
        drain(archive)
        archive.on_pod("MODIFIED", job_pod(uid=f"u-pod-{status}"))
        drain(archive)
        assert refusing.job_patches == 1


def test_a_job_patch_that_fails_otherwise_is_tried_again() -> None:
    refusing = RefusingApi(500)
    archive = ArchiveService(refusing, None, job_ttl_seconds=60)  # type: ignore[arg-type]
    with pytest.raises(ApiError):
        asyncio.run(archive.set_job_ttl(job_pod()))
    assert "u-pod" not in archive.state.timed_pods, "the writer tries the pod again"


def test_the_ttl_patch_names_the_jobs_uid_and_sets_only_its_ttl() -> None:
    job = controlling_job(job_pod())
    assert job == JobRef(NS, "towline-step-deploy-1-apply-1", "u-job")
    assert job_ttl_patch(job, 1) == {"metadata": {"uid": "u-job"}, "spec": {"ttlSecondsAfterFinished": 1}}
    assert controlling_job({"metadata": {"ownerReferences": [{"kind": "Job", "name": "j", "uid": "u"}]}}) is None, (
        "a Job that does not control the pod")


class CountingApi(Api):
    """Log reads that yield to the loop while in flight, counted."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.most_in_flight = 0

    async def read_text(self, path: str, *, query: dict[str, str] | None = None) -> str:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        for _ in range(3):
            await asyncio.sleep(0)  # a turn of the loop, as a request in flight gives: not a wait
        self.in_flight -= 1
        return await super().read_text(path, query=query)


def numbered_pod(number: int) -> dict[str, Any]:
    ended = pod()
    ended["metadata"] = {**ended["metadata"], "name": f"towline-step-deploy-1-apply-{number}", "uid": f"u-pod-{number}"}
    return ended


def test_ended_pods_are_read_side_by_side_and_their_logs_appended_one_at_a_time_in_order(
    store: ArchiveStore,
) -> None:
    api = CountingApi()
    archive = service(store, api)
    archive.on_run("ADDED", run("Running"))
    for number in range(12):
        archive.on_pod("ADDED", numbered_pod(number))
    batch = archive.next_batch()
    assert [name for _, _, name in batch] == [f"towline-step-deploy-1-apply-{number}" for number in range(12)]
    assert asyncio.run(archive.write_pods(batch))
    assert 1 < api.most_in_flight <= AT_ONCE, api.most_in_flight
    logs = sorted(store.logs(NS, "u-run"), key=lambda entry: entry.seq)
    assert [entry.key for entry in logs] == [f"u-pod-{number}/step" for number in range(12)]
    archive.on_run("MODIFIED", run())
    drain(archive)
    archived = store.run(NS, "u-run")
    assert archived is not None and len(archived.entry.body["logs"]) == 12
    assert len(api.log_reads) == 12, "the run's record takes the references the writer kept, and reads nothing again"


def test_the_writer_takes_the_next_item_alone_when_fewer_than_two_pods_are_near() -> None:
    archive = ArchiveService(Api(), None)  # type: ignore[arg-type]
    archive.state.want("run", NS, "deploy-1")
    archive.state.want("pod", NS, "towline-step-deploy-1-apply-1")
    assert archive.next_batch() == [("run", NS, "deploy-1")]
