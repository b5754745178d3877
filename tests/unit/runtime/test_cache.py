"""The watch-fed cache of a run's children and its expectations: it is trusted only when it holds
everything the run's status says exists; otherwise the reconcile lists live."""

from __future__ import annotations

from typing import Any

import pytest

from towline.api.run import StepStatus, WorkflowRunStatus
from towline.k8s.client import KubeApi
from towline.k8s.labels import ANNOTATION_STEP_ID, LABEL_ATTEMPT, LABEL_RUN, STEP_JOB_MANAGER
from towline.k8s.objects import StepPodSettings
from towline.k8s.observe import build_observed
from towline.runtime.cache import ChildCache
from towline.runtime.config import OperatorConfig
from towline.runtime.operator import CHILD_BATCH_SECONDS, WIDE_RUN_BATCH_SECONDS, WIDE_RUN_JOBS, Operator

NS, RUN, RUN_UID = "team", "release", "run-uid"
KEY = (NS, RUN)
IMAGE = "ghcr.io/towline/runner:0.1.0"


def job(name: str, *, version: str = "10", uid: str = "job-uid", complete: bool = False,
        managed: bool = False, started: str | None = None) -> dict[str, Any]:
    """A step Job as the API server shows it; `managed`: the operator keeps its pod (`spec.managedBy`),
    `started`: its `startTime`."""
    status: dict[str, Any] = {"active": 1}
    if complete:
        status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    if started:
        status["startTime"] = started
    return {
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "resourceVersion": version,
                     "labels": {LABEL_RUN: RUN, LABEL_ATTEMPT: "1"},
                     "ownerReferences": [{"kind": "WorkflowRun", "name": RUN, "uid": RUN_UID, "controller": True}],
                     "annotations": {ANNOTATION_STEP_ID: "build", "unrelated": "x" * 1000}},
        "spec": {**({"managedBy": STEP_JOB_MANAGER} if managed else {}),
                 "template": {"spec": {"activeDeadlineSeconds": 600,
                                       "containers": [{"name": "step", "image": IMAGE,
                                                       "env": [{"name": "TOKEN", "value": "not kept"}]}]}}},
        "status": status,
    }


def pod(job_name: str, *, terminated: bool, job_uid: str = "job-uid") -> dict[str, Any]:
    state = {"terminated": {"exitCode": 0, "message": '{"ok": true, "output": {"v": 1}}'}} if terminated \
        else {"running": {}}
    return {"metadata": {"name": f"{job_name}-abcde", "namespace": NS, "uid": "pod-uid",
                         "labels": {LABEL_RUN: RUN, "job-name": job_name},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid,
                                             "controller": True}]},
            "spec": {"containers": [{"name": "step", "image": IMAGE, "env": [{"name": "TOKEN", "value": "not kept"}]}]},
            "status": {"containerStatuses": [{"name": "step", "image": IMAGE, "state": state}]}}


def running(job_name: str | None = None, approval: str | None = None) -> WorkflowRunStatus:
    return WorkflowRunStatus(phase="Running", steps=[
        StepStatus(id="build", phase="Running", attempt=1, job_name=job_name, approval_name=approval)])


def test_a_just_created_job_is_not_taken_for_a_vanished_one() -> None:
    cache = ChildCache()
    status = running("release-build-1")
    assert not cache.covers(KEY, status), "the status names a Job the cache has not seen: list live"
    cache.learned("Job", job("release-build-1"))  # the create's answer, before any watch event
    assert cache.covers(KEY, status)
    jobs, _, _ = cache.children(KEY)
    assert [j["metadata"]["name"] for j in jobs] == ["release-build-1"]


def test_a_late_create_answer_does_not_undo_a_newer_watch_event() -> None:
    cache = ChildCache()
    cache.saw("Job", job("release-build-1", version="12", complete=True))
    cache.learned("Job", job("release-build-1", version="10"))
    jobs, _, _ = cache.children(KEY)
    assert jobs[0]["status"]["succeeded"] == 1


def test_versions_are_opaque_the_watch_order_decides() -> None:
    """resourceVersions are never ordered: a watch event replaces, whatever its version looks like."""
    cache = ChildCache()
    cache.learned("Job", job("release-build-1", version="b9"))
    cache.saw("Job", job("release-build-1", version="a1", complete=True))
    assert cache.children(KEY)[0][0]["status"]["succeeded"] == 1
    cache.learned("Job", job("release-build-1", version="zz"))
    assert cache.children(KEY)[0][0]["metadata"]["resourceVersion"] == "a1", "an answer never replaces"


def test_a_late_list_answer_does_not_bring_back_a_job_the_watch_showed_deleted() -> None:
    cache = ChildCache()
    cache.saw("Job", job("release-build-1"))
    cache.gone("Job", job("release-build-1"))
    cache.learned("Job", job("release-build-1"))  # listed before the delete, answered after its event
    assert cache.children(KEY) == ([], [], [])
    cache.learned("Job", job("release-build-1", uid="recreated"))
    assert cache.children(KEY)[0][0]["metadata"]["uid"] == "recreated"


def test_a_recreated_job_of_the_same_name_replaces_the_old_one() -> None:
    cache = ChildCache()
    cache.saw("Job", job("release-build-1", version="12", uid="old"))
    cache.saw("Job", job("release-build-1", version="3", uid="new"))
    assert cache.children(KEY)[0][0]["metadata"]["uid"] == "new"
    cache.gone("Job", job("release-build-1", uid="old"))  # the old one's late DELETED event
    assert cache.children(KEY)[0][0]["metadata"]["uid"] == "new"


def test_a_finished_job_whose_pod_result_is_not_cached_is_listed_live() -> None:
    cache = ChildCache()
    status = running("release-build-1")
    cache.saw("Job", job("release-build-1", complete=True))
    cache.saw("Pod", pod("release-build-1", terminated=False))
    assert not cache.covers(KEY, status), "the result lives in the pod's termination message"
    cache.saw("Pod", pod("release-build-1", terminated=True, job_uid="someone-else"))
    assert not cache.covers(KEY, status), "a look-alike pod the Job does not control holds no result of it"
    cache.saw("Pod", pod("release-build-1", terminated=True))
    assert cache.covers(KEY, status)
    observed = build_observed(*cache.children(KEY), run_name=RUN, run_uid=RUN_UID)
    found = observed.jobs[("build", 1)]
    assert found.state == "succeeded"
    assert found.result is not None
    assert found.result.output == {"v": 1}


def test_an_open_approval_not_yet_seen_is_listed_live() -> None:
    cache = ChildCache()
    status = running(approval="release-build-approval")
    assert not cache.covers(KEY, status)
    cache.saw("Approval", {"kind": "Approval", "metadata": {"name": "release-build-approval", "namespace": NS,
                                                             "labels": {LABEL_RUN: RUN}},
                           "spec": {"runName": RUN, "step": "build"}})
    assert cache.covers(KEY, status)


def test_a_deleted_job_leaves_the_cache_and_the_run_is_listed_again() -> None:
    cache = ChildCache()
    cache.saw("Job", job("release-build-1"))
    cache.gone("Job", job("release-build-1"))
    assert cache.children(KEY) == ([], [], [])
    assert not cache.covers(KEY, running("release-build-1"))
    assert len(cache) == 0


def test_the_cache_keeps_no_environment_or_unrelated_annotation_only_images() -> None:
    cache = ChildCache()
    cache.saw("Job", job("release-build-1", managed=True))
    cache.saw("Pod", pod("release-build-1", terminated=True))
    jobs, pods, _ = cache.children(KEY)
    assert "not kept" not in repr(jobs) + repr(pods)
    assert jobs[0]["spec"] == {"managedBy": STEP_JOB_MANAGER, "template": {"spec": {
        "activeDeadlineSeconds": 600, "containers": [{"name": "step", "image": IMAGE}]}}}
    assert pods[0]["spec"]["containers"] == [{"name": "step", "image": IMAGE}]
    assert jobs[0]["metadata"]["annotations"] == {ANNOTATION_STEP_ID: "build"}


def test_objects_without_the_run_label_are_not_the_runs() -> None:
    cache = ChildCache()
    stray = job("release-build-1")
    del stray["metadata"]["labels"][LABEL_RUN]
    cache.saw("Job", stray)
    assert len(cache) == 0


def test_only_a_change_of_a_jobs_state_calls_for_a_pass() -> None:
    cache = ChildCache()
    assert cache.saw("Job", job("release-build-1", version="10")) is True, "a new Job"
    ready = job("release-build-1", version="11")
    ready["status"]["ready"] = 1
    assert cache.saw("Job", ready) is False, "still active: nothing a reconcile would decide on"
    assert cache.saw("Job", job("release-build-1", version="12", complete=True)) is True
    assert cache.saw("Job", job("release-build-1", version="13", uid="recreated")) is True


def test_a_finished_runs_children_are_not_kept() -> None:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    operator = Operator(config=config, connection=KubeApi(object()))
    body = {"metadata": {"name": RUN, "namespace": NS, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"workflowRef": {"name": "release"}}, "status": {"phase": "Running"}}
    operator.saw_run(KEY, body)
    operator.known.children.saw("Job", job("release-build-1", complete=True))
    assert operator.wants_children(KEY)
    assert len(operator.known.children) == 1
    operator.saw_run(KEY, {**body, "status": {"phase": "Succeeded"}})
    assert len(operator.known.children) == 0
    assert not operator.wants_children(KEY)
    last = operator.workflow_deps.runs.last_run_of(NS, "release")
    assert last is not None
    assert (last.name, last.phase) == (RUN, "Succeeded")


def test_a_user_step_types_pod_is_observed_the_same_from_the_cache_as_from_a_live_list() -> None:
    """The runner's `prepare` init container (its image, its status) survives the trim: without it the image check
    would refuse every user step's result, and a not-JSON message would be echoed as the runtime's."""
    user_image = "localhost/towline-steps/tcp-probe:dev"
    full_job = job("release-build-1", complete=True)
    full_job["spec"]["template"]["spec"]["initContainers"] = [{"name": "prepare", "image": IMAGE}]
    full_job["spec"]["template"]["spec"]["containers"][0]["image"] = user_image
    full_pod = pod("release-build-1", terminated=True)
    full_pod["spec"]["initContainers"] = [{"name": "prepare", "image": IMAGE, "env": [{"name": "T", "value": "x"}]}]
    full_pod["spec"]["containers"][0]["image"] = user_image
    full_pod["status"]["containerStatuses"][0]["image"] = user_image
    full_pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = ("token=hunter2 " * 300)[-4096:]
    full_pod["status"]["initContainerStatuses"] = [
        {"name": "prepare", "image": IMAGE, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]
    cache = ChildCache()
    cache.saw("Job", full_job)
    cache.saw("Pod", full_pod)
    cached = build_observed(*cache.children(KEY), run_name=RUN, run_uid=RUN_UID)
    live = build_observed([full_job], [full_pod], [], run_name=RUN, run_uid=RUN_UID)
    assert cached == live
    [observation] = cached.jobs.values()
    assert observation.result is not None and observation.result.message is not None
    assert "hunter2" not in observation.result.message and "not shown" in observation.result.message
    _, pods, _ = cache.children(KEY)
    assert "env" not in pods[0]["spec"]["initContainers"][0], "no environment is kept"


def test_a_job_of_that_name_labelled_for_another_run_does_not_cover_this_runs_step() -> None:
    """Objects are kept by kind, namespace and name and found through the run index: whoever labels their own
    object with the step's Job name for another run (or relabels it) never makes this run's status look covered."""
    cache = ChildCache()
    elsewhere = job("release-build-1", complete=True)
    elsewhere["metadata"]["labels"][LABEL_RUN] = "other-run"
    cache.saw("Job", elsewhere)
    assert not cache.covers(KEY, running("release-build-1"))
    assert cache.children(KEY) == ([], [], [])
    assert cache.children((NS, "other-run"))[0][0]["metadata"]["name"] == "release-build-1"
    relabelled = job("release-build-1")
    cache.saw("Job", relabelled)
    assert cache.covers(KEY, running("release-build-1")), "the relabelled Job now is this run's (and an active Job)"
    assert cache.children((NS, "other-run")) == ([], [], []), "and no longer the other run's"


def test_a_finished_job_counts_only_with_a_finished_pod_it_controls() -> None:
    cache = ChildCache()
    cache.saw("Job", job("release-build-1", complete=True))
    cache.saw("Pod", pod("release-build-1", terminated=True, job_uid="someone-elses-job"))
    assert not cache.covers(KEY, running("release-build-1")), "a look-alike pod controlled by another Job"
    cache.saw("Pod", {**pod("release-build-1", terminated=True), "metadata": {
        **pod("release-build-1", terminated=True)["metadata"], "name": "release-build-1-fghij", "uid": "p2"}})
    assert cache.covers(KEY, running("release-build-1"))
    cache.forget_run(KEY)
    assert len(cache) == 0


def test_a_fan_outs_ending_steps_share_a_pass_and_the_last_one_is_queued_at_once() -> None:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    operator = Operator(config=config, connection=KubeApi(object()))
    children = operator.known.children
    children.saw("Job", job("release-a-1", uid="a"))
    children.saw("Job", job("release-b-1", uid="b"))
    assert children.active_jobs(KEY, at_most=WIDE_RUN_JOBS) == 2
    children.saw("Job", job("release-a-1", uid="a", version="11", complete=True))
    operator.child_changed(KEY)
    assert KEY not in operator.runs, "b still runs: the pass waits for it a little"
    assert operator.runs.promote_due() == pytest.approx(CHILD_BATCH_SECONDS, abs=0.1)
    children.saw("Job", job("release-b-1", uid="b", version="12", complete=True))
    operator.child_changed(KEY)
    assert children.active_jobs(KEY, at_most=WIDE_RUN_JOBS) == 0
    assert KEY in operator.runs, "the last one running ended: its pass is queued at once"


def test_a_wide_runs_ending_steps_wait_longer_for_each_other() -> None:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    operator = Operator(config=config, connection=KubeApi(object()))
    children = operator.known.children
    for index in range(WIDE_RUN_JOBS + 1):
        children.saw("Job", job(f"release-s{index}-1", uid=f"u{index}"))
    assert children.active_jobs(KEY, at_most=100) == WIDE_RUN_JOBS + 1
    assert children.active_jobs(KEY, at_most=WIDE_RUN_JOBS) == WIDE_RUN_JOBS, "the count stops once it is known"
    children.saw("Job", job("release-s0-1", uid="u0", version="11", complete=True))
    assert children.active_jobs(KEY, at_most=WIDE_RUN_JOBS) == WIDE_RUN_JOBS
    operator.child_changed(KEY)
    assert KEY not in operator.runs
    assert operator.runs.promote_due() == pytest.approx(WIDE_RUN_BATCH_SECONDS, abs=0.1), \
        "WIDE_RUN_JOBS still run: their ends share a longer window"


def ended_pod(job_name: str, phase: str, *, job_uid: str = "job-uid", finished: str = "2026-12-05T07:00:03Z",
              exit_code: int = 0) -> dict[str, Any]:
    """A step pod as the kubelet reports it once it ended: its phase and the container's end."""
    body = pod(job_name, terminated=True, job_uid=job_uid)
    body["status"]["phase"] = phase
    terminated = body["status"]["containerStatuses"][0]["state"]["terminated"]
    terminated.update(exitCode=exit_code, finishedAt=finished)
    return body


def test_a_succeeded_pod_ends_its_attempt_before_the_job_controller_writes_complete() -> None:
    """The Job controller writes `Complete` about two seconds after the pod succeeded; the pass need not wait."""
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    operator = Operator(config=config, connection=KubeApi(object()))
    children = operator.known.children
    children.saw("Job", job("release-build-1"))
    assert children.saw("Pod", ended_pod("release-build-1", "Succeeded")) is True
    assert children.active_jobs(KEY, at_most=WIDE_RUN_JOBS) == 0
    operator.child_changed(KEY)
    assert KEY in operator.runs, "a chain's step ended: its pass is queued at once, not after a batch"
    assert children.covers(KEY, running("release-build-1"))
    observed = build_observed(*children.children(KEY), run_name=RUN, run_uid=RUN_UID)
    found = observed.jobs[("build", 1)]
    assert found.state == "succeeded"
    assert found.result is not None and found.result.output == {"v": 1}
    assert found.finished_at is not None and found.finished_at.isoformat() == "2026-12-05T07:00:03+00:00"
    assert children.saw("Job", job("release-build-1", version="11", complete=True)) is False, \
        "the Job's Complete after its pod's success changes nothing a pass decides on"


def test_a_failed_pod_waits_for_its_jobs_condition_which_names_the_cause() -> None:
    cache = ChildCache()
    cache.saw("Job", job("release-build-1"))
    cache.saw("Pod", ended_pod("release-build-1", "Failed", exit_code=1))
    assert cache.active_jobs(KEY, at_most=WIDE_RUN_JOBS) == 1
    observed = build_observed(*cache.children(KEY), run_name=RUN, run_uid=RUN_UID)
    assert observed.jobs[("build", 1)].state == "active"


def test_a_succeeded_pod_another_job_controls_does_not_end_this_jobs_attempt() -> None:
    cache = ChildCache()
    cache.saw("Job", job("release-build-1"))
    cache.saw("Pod", ended_pod("release-build-1", "Succeeded", job_uid="someone-elses-job"))
    assert cache.active_jobs(KEY, at_most=WIDE_RUN_JOBS) == 1
    observed = build_observed(*cache.children(KEY), run_name=RUN, run_uid=RUN_UID)
    assert observed.jobs[("build", 1)].state == "active"
    assert observed.jobs[("build", 1)].result is None
