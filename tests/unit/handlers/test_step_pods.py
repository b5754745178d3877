"""A step Job the operator keeps (`spec.managedBy`, towline.k8s.steppods), through reconcile_run and the in-memory
API server: the pass makes the Job's one pod and writes its start before it, records the pod's end on the Job, makes
the pod a crashed pass did not make, and never makes a second pod for a Job that had one."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from handler_fakes import (
    JOB_KIND,
    NAMESPACE,
    POD_KIND,
    TWO_STEPS,
    MemoryContext,
    finish_job,
    run,
    setup,
    status_of,
    workflow,
)

from towline.engine.observed import REASON_POD_LOST, REASON_POD_REFUSED
from towline.handlers.runs import reconcile_run
from towline.k8s.client import JOBS, PODS, ApiError
from towline.k8s.labels import STEP_JOB_MANAGER
from towline.k8s.steppods import POD_CHECK_GRACE, POD_EXISTS_CHECK

PLAN_JOB = "towline-step-r1-plan-1"


def reconcile(context: MemoryContext) -> datetime | None:
    return asyncio.run(reconcile_run(context, NAMESPACE, "r1"))


def stored(context: MemoryContext, kind: str, name: str = PLAN_JOB) -> dict[str, Any] | None:
    return context.api.stored(kind, NAMESPACE, name)


def started(context: MemoryContext) -> dict[str, Any]:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    reconcile(context)
    job = stored(context, JOB_KIND)
    assert job is not None
    return job


def conditions(job: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c["reason"]) for c in job["status"].get("conditions") or [] if c["status"] == "True"]


def test_the_pass_makes_the_jobs_one_pod_after_writing_its_start(context: MemoryContext) -> None:
    job = started(context)
    assert job["spec"]["managedBy"] == STEP_JOB_MANAGER
    assert job["status"]["startTime"] and job["status"]["active"] == 1
    pod = stored(context, POD_KIND)
    assert pod is not None, "the pod is named as its Job"
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": PLAN_JOB,
                                                   "uid": job["metadata"]["uid"], "controller": True}]
    assert pod["spec"] == job["spec"]["template"]["spec"]
    assert pod["metadata"]["labels"] == job["spec"]["template"]["metadata"]["labels"]
    writes = [(method, path) for method, path in context.api.requests
              if method != "GET" and ("/jobs" in path or "/pods" in path)]
    assert writes == [("POST", JOBS.path(NAMESPACE)), ("PATCH", f"{JOBS.path(NAMESPACE, PLAN_JOB)}/status"),
                      ("POST", PODS.path(NAMESPACE))], "the start is written before the pod exists"


def test_a_pods_end_is_recorded_on_its_job_as_the_api_server_checks_a_finished_job(context: MemoryContext) -> None:
    started(context)
    asyncio.run(finish_job(context.api, NAMESPACE, PLAN_JOB, {"ok": True, "output": {"release": "v1"}}))
    reconcile(context)
    job = stored(context, JOB_KIND)
    assert job is not None
    assert conditions(job) == [("SuccessCriteriaMet", "CompletionsReached"), ("Complete", "CompletionsReached")]
    assert job["status"]["completionTime"] >= job["status"]["startTime"]
    assert (job["status"]["succeeded"], job["status"]["active"]) == (1, 0)
    assert [(s["id"], s["phase"]) for s in status_of(context, "r1")["steps"]] == [
        ("plan", "Succeeded"), ("release", "Running")]


def test_a_pass_that_crashed_between_the_job_and_its_pod_is_completed_by_the_next(context: MemoryContext) -> None:
    job = started(context)
    # As if the pass had stopped right after the Job's create: no start written, no pod.
    del context.api.objects[(POD_KIND, NAMESPACE, PLAN_JOB)]
    asyncio.run(context.api.replace(f"{JOBS.path(NAMESPACE, PLAN_JOB)}/status", {**job, "status": {}}))
    reconcile(context)
    again = stored(context, JOB_KIND)
    assert again is not None and again["status"].get("startTime")
    assert stored(context, POD_KIND) is not None, "the next pass made the pod"


def test_a_started_jobs_vanished_pod_is_never_made_again_and_fails_the_attempt(context: MemoryContext) -> None:
    job = started(context)
    del context.api.objects[(POD_KIND, NAMESPACE, PLAN_JOB)]  # deleted at once (--force --grace-period=0)
    wake = reconcile(context)
    assert stored(context, POD_KIND) is None, "a started Job never gets a second pod"
    assert wake is not None and wake <= datetime.now(UTC) + POD_EXISTS_CHECK, "a pod nobody knows of is read soon"
    # Past that check: the start as long ago.
    long_ago = datetime.now(UTC) - POD_EXISTS_CHECK - timedelta(seconds=5)
    asyncio.run(context.api.replace(f"{JOBS.path(NAMESPACE, PLAN_JOB)}/status", {
        **job, "status": {**job["status"], "startTime": long_ago.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
    reconcile(context)
    lost = stored(context, JOB_KIND)
    assert lost is not None and conditions(lost) == [("FailureTarget", REASON_POD_LOST), ("Failed", REASON_POD_LOST)]
    assert "completionTime" not in lost["status"], "the API server refuses a completion time without Complete"
    assert (lost["status"]["failed"], lost["status"]["active"]) == (1, 0)
    assert stored(context, POD_KIND) is None
    reconcile(context)
    [plan] = [s for s in status_of(context, "r1")["steps"] if s["id"] == "plan"]
    assert plan["phase"] == "Failed"
    assert plan["message"].startswith(f"the step's Job {PLAN_JOB} failed without a result ({REASON_POD_LOST}): its "
                                      "pod was deleted before it ended")


def test_a_pod_that_has_not_ended_at_the_steps_deadline_is_deleted_and_the_attempt_fails(
        context: MemoryContext) -> None:
    """A pod never scheduled is stopped by no kubelet: the operator does what the Job controller did at a Job's
    `activeDeadlineSeconds`, counted from the Job's start."""
    job = started(context)
    long_ago = datetime.now(UTC) - timedelta(seconds=600) - POD_CHECK_GRACE - timedelta(seconds=5)
    asyncio.run(context.api.replace(f"{JOBS.path(NAMESPACE, PLAN_JOB)}/status", {
        **job, "status": {**job["status"], "startTime": long_ago.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
    reconcile(context)
    assert stored(context, POD_KIND) is None, "deleted"
    stopped = stored(context, JOB_KIND)
    assert stopped is not None
    assert conditions(stopped) == [("FailureTarget", "DeadlineExceeded"), ("Failed", "DeadlineExceeded")]
    reconcile(context)
    [plan] = [s for s in status_of(context, "r1")["steps"] if s["id"] == "plan"]
    assert "(DeadlineExceeded): it ran past the step's timeoutSeconds (counted from the Job's start)" in plan["message"]


def test_before_the_deadline_a_running_pod_is_not_looked_at(context: MemoryContext) -> None:
    started(context)
    before = len(context.api.requests)
    wake = reconcile(context)
    assert not [r for r in context.api.requests[before:] if r[1].startswith(PODS.path(NAMESPACE, PLAN_JOB))], \
        "the watch tells of its end"
    assert wake is not None and wake >= datetime.now(UTC) + timedelta(seconds=600)


def test_a_pod_the_api_server_refuses_fails_the_attempt_as_refused_and_may_be_retried(
        context: MemoryContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing ran, so even a mutating step may run again; the Job's condition carries the API server's words."""
    create = context.api._create

    def quota(target: Any, body: Any) -> Any:
        if target.resource.endswith("/pods"):
            raise ApiError(403, 'pods "x" is forbidden: exceeded quota: pods, requested: pods=1, limited: pods=0')
        return create(target, body)

    monkeypatch.setattr(context.api, "_create", quota)
    started(context)
    assert stored(context, POD_KIND) is None
    job = stored(context, JOB_KIND)
    assert job is not None
    assert conditions(job) == [("FailureTarget", REASON_POD_REFUSED), ("Failed", REASON_POD_REFUSED)]
    assert "exceeded quota" in job["status"]["conditions"][1]["message"]
    reconcile(context)
    [plan] = [s for s in status_of(context, "r1")["steps"] if s["id"] == "plan"]
    assert plan["errorClass"] == "transient"
    assert "the API server refused its pod" in plan["message"] and "nothing ran" in plan["message"]
