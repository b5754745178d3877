"""A step Job the operator keeps (`spec.managedBy`, towline.k8s.steppods), through reconcile_run and the in-memory
API server: the pass makes the Job's one pod, held by the operator's finalizer; records the pod's end on the Job
and only then lets the pod go; makes the pod a stopped pass did not make; never makes a second pod for a Job
whose pod was deleted; stops a pod past the step's deadline; fails a refused pod's attempt as retryable; and lets
the pods of a cancelled or deleted run go."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from handler_fakes import (
    JOB_KIND,
    NAMESPACE,
    POD_KIND,
    RUNS,
    TWO_STEPS,
    MemoryContext,
    finish_job,
    run,
    setup,
    status_of,
    workflow,
)

from towline.engine.observed import REASON_POD_REFUSED
from towline.handlers.runs import reconcile_run
from towline.k8s.client import JOBS, PODS, WORKFLOW_RUNS, ApiError
from towline.k8s.labels import STEP_JOB_MANAGER, STEP_POD_FINALIZER
from towline.k8s.steppods import DEADLINE_GRACE

PLAN_JOB = "towline-step-r1-plan-1"


def reconcile(context: MemoryContext) -> datetime | None:
    return asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, "r1"))


def stored(context: MemoryContext, kind: str, name: str = PLAN_JOB) -> dict[str, Any] | None:
    return context.api.stored(kind, NAMESPACE, name)


def started(context: MemoryContext) -> dict[str, Any]:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    reconcile(context)
    job = stored(context, JOB_KIND)
    assert job is not None
    return job


def conditions(job: dict[str, Any]) -> list[tuple[str, str]]:
    found = (job.get("status") or {}).get("conditions") or []
    return [(c["type"], c["reason"]) for c in found if c["status"] == "True"]


def plan_step(context: MemoryContext) -> dict[str, Any]:
    [plan] = [s for s in status_of(context, "r1")["steps"] if s["id"] == "plan"]
    return dict(plan)


def pod_requests(context: MemoryContext, since: int = 0) -> list[tuple[str, str]]:
    return [r for r in context.api.requests[since:] if r[1].startswith(PODS.path(NAMESPACE))]


def kubelet_ends(context: MemoryContext, phase: str, **status: Any) -> None:
    pod = stored(context, POD_KIND)
    assert pod is not None
    asyncio.run(context.api.replace(f"{PODS.path(NAMESPACE, PLAN_JOB)}/status", {
        **pod, "status": {"phase": phase, "containerStatuses": [
            {"name": "step", "state": {"terminated": {"exitCode": 137, "finishedAt": "2026-12-05T07:00:03Z"}}}],
            **status}}))


def test_the_pass_makes_the_jobs_one_pod_held_by_the_operators_finalizer(context: MemoryContext) -> None:
    job = started(context)
    assert job["spec"]["managedBy"] == STEP_JOB_MANAGER
    pod = stored(context, POD_KIND)
    assert pod is not None, "the pod is named as its Job"
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": PLAN_JOB,
                                                   "uid": job["metadata"]["uid"], "controller": True}]
    assert pod["metadata"]["finalizers"] == [STEP_POD_FINALIZER]
    assert pod["spec"] == job["spec"]["template"]["spec"]
    assert pod["metadata"]["labels"] == job["spec"]["template"]["metadata"]["labels"]
    writes = [(method, path) for method, path in context.api.requests
              if method != "GET" and ("/jobs" in path or "/pods" in path)]
    assert writes == [("POST", JOBS.path(NAMESPACE)), ("POST", PODS.path(NAMESPACE))]


def test_a_pods_end_is_recorded_on_its_job_before_the_pod_is_let_go(context: MemoryContext) -> None:
    started(context)
    asyncio.run(finish_job(context.api, NAMESPACE, PLAN_JOB, {"ok": True, "output": {"release": "v1"}}))
    before = len(context.api.requests)
    reconcile(context)
    job = stored(context, JOB_KIND)
    assert job is not None
    assert conditions(job) == [("SuccessCriteriaMet", "CompletionsReached"), ("Complete", "CompletionsReached")]
    assert job["status"]["completionTime"] >= job["status"]["startTime"]
    assert (job["status"]["succeeded"], job["status"]["active"]) == (1, 0)
    pod = stored(context, POD_KIND)
    assert pod is not None and "finalizers" not in pod["metadata"]
    writes = [(m, p) for m, p in context.api.requests[before:] if m == "PATCH"]
    assert writes[:2] == [("PATCH", f"{JOBS.path(NAMESPACE, PLAN_JOB)}/status"),
                          ("PATCH", PODS.path(NAMESPACE, PLAN_JOB))], "the end is written first"
    assert [(s["id"], s["phase"]) for s in status_of(context, "r1")["steps"]] == [
        ("plan", "Succeeded"), ("release", "Running")]


def test_a_pass_that_stopped_between_the_job_and_its_pod_is_completed_by_the_next(context: MemoryContext) -> None:
    started(context)
    del context.api.objects[(POD_KIND, NAMESPACE, PLAN_JOB)]  # as if the pod's create never happened
    reconcile(context)
    pod = stored(context, POD_KIND)
    assert pod is not None and pod["metadata"]["finalizers"] == [STEP_POD_FINALIZER], "the next pass made it"


def test_a_deleted_pod_ends_as_failed_and_is_never_made_again(context: MemoryContext) -> None:
    """`kubectl delete --force` on a running step pod: the finalizer keeps it until the kubelet stopped it and its
    end is written, so the next pass never takes it for a pod that was never made."""
    started(context)
    asyncio.run(context.api.delete(PODS.path(NAMESPACE, PLAN_JOB)))
    reconcile(context)
    pod = stored(context, POD_KIND)
    assert pod is not None and pod["metadata"].get("deletionTimestamp"), "kept by the finalizer while it runs"
    assert [m for m, p in pod_requests(context) if m == "POST"] == ["POST"], "no second pod"
    kubelet_ends(context, "Failed")
    reconcile(context)
    job = stored(context, JOB_KIND)
    assert job is not None and conditions(job) == [("FailureTarget", "PodFailed"), ("Failed", "PodFailed")]
    assert "completionTime" not in job["status"], "the API server refuses a completion time without Complete"
    assert stored(context, POD_KIND) is None, "let go once its end was written, so deleted"
    reconcile(context)
    assert [m for m, p in pod_requests(context) if m == "POST"] == ["POST"], "still no second pod"
    assert plan_step(context)["phase"] == "Failed"


def test_a_pod_that_has_not_ended_past_the_steps_deadline_is_stopped_and_the_attempt_fails(
        context: MemoryContext) -> None:
    """A pod never scheduled is stopped by no kubelet: the operator does what the Job controller did at a Job's
    `activeDeadlineSeconds`."""
    started(context)
    pod = stored(context, POD_KIND)
    assert pod is not None
    long_ago = datetime.now(UTC) - timedelta(seconds=600) - DEADLINE_GRACE - timedelta(seconds=5)
    pod["metadata"]["creationTimestamp"] = long_ago.strftime("%Y-%m-%dT%H:%M:%SZ")
    reconcile(context)
    assert stored(context, POD_KIND) is None, "deleted, and let go"
    stopped = stored(context, JOB_KIND)
    assert stopped is not None
    assert conditions(stopped) == [("FailureTarget", "DeadlineExceeded"), ("Failed", "DeadlineExceeded")]
    reconcile(context)
    assert "(DeadlineExceeded): it ran past the step's timeoutSeconds" in plan_step(context)["message"]


def test_before_the_deadline_a_running_pod_is_not_read_and_the_pass_wakes_at_it(context: MemoryContext) -> None:
    started(context)
    before = len(context.api.requests)
    wake = reconcile(context)
    assert not [r for r in pod_requests(context, before) if r[1].startswith(PODS.path(NAMESPACE, PLAN_JOB))]
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
    plan = plan_step(context)
    assert plan["errorClass"] == "transient"
    assert "the API server refused its pod" in plan["message"] and "nothing ran" in plan["message"]


def test_a_cancelled_runs_pods_are_let_go_with_their_jobs(context: MemoryContext) -> None:
    started(context)
    asyncio.run(context.api.merge_patch(WORKFLOW_RUNS.path(NAMESPACE, "r1"), {"spec": {"cancel": True}}))
    reconcile(context)
    assert stored(context, JOB_KIND) is None
    pod = stored(context, POD_KIND)
    assert pod is None or "finalizers" not in pod["metadata"], "the garbage collector may delete it"


def test_the_pods_of_a_run_deleted_while_running_are_let_go(context: MemoryContext) -> None:
    started(context)
    del context.api.objects[(RUNS, NAMESPACE, "r1")]
    del context.api.objects[(JOB_KIND, NAMESPACE, PLAN_JOB)]  # the garbage collector, after the run
    asyncio.run(context.api.delete(PODS.path(NAMESPACE, PLAN_JOB)))
    reconcile(context)
    assert stored(context, POD_KIND) is None, "its finalizer removed, the deletion completed"
