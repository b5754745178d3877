"""The pod of a step Job the operator manages itself (`spec.managedBy: towline.dev/operator`).

Every step attempt stays one Job, owned by its run, labelled and named as
before, and the admission policies still hold it to a step's shape. What the
cluster's Job controller did for it, the operator now does, as Argo and Tekton
do for their own pods: it makes the Job's one pod from the Job's (immutable)
template, controlled by the Job, and writes the Job's status: `startTime` before
the pod exists, `Complete` or `Failed` once the pod ended. The Job controller
spent seven API requests per step on that (the pod, three status writes, its
tracking finalizer's removal, two Events); the operator spends three, and a
step's end no longer waits for the Job controller's batching.

The Job's `startTime` is written before its pod is created, so it records that
the pod may exist: a Job with `startTime` and no pod lost its pod (deleted,
or its node gone) and is never given a second one, since whatever ran in the
first may have had its side effect. Such an attempt fails as `PodLost`, and the
engine decides, as for any failure without a result, whether it may retry.
A Job without `startTime` never had a pod: a pass that crashed between the
Job's create and its pod's is completed by the next (`StepPodUpkeep`).

Jobs without `managedBy` (made by an earlier release) are left to the Job
controller as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from towline.engine.observed import REASON_POD_LOST, REASON_POD_REFUSED
from towline.k8s.client import JOBS, PODS, ApiError, KubeApi
from towline.k8s.observe import (
    controller_uid,
    job_state,
    managed_by_operator,
    pod_ended,
    pod_failure_reason,
    pod_finished_at,
    pod_succeeded,
)
from towline_connectors.wire import parse_rfc3339, rfc3339

JSON = dict[str, Any]
log = logging.getLogger(__name__)

POD_CHECK_GRACE = timedelta(seconds=30)
"""How long past a step's deadline, counted from its Job's start, the operator looks at a pod the watch has shown
no end of. The kubelet stops a pod at its own `activeDeadlineSeconds`, counted from the pod's start (a little
later); but a pod deleted at once (`--force --grace-period=0`) ends without the final phase the operator watches
for, and a pod never scheduled is never stopped by any kubelet. The Job controller failed such a Job at its
deadline; so does the operator."""
POD_EXISTS_CHECK = timedelta(seconds=30)
"""How long after a Job's start the operator reads a pod it has neither made nor seen: a pass that crashed (or
lost its Lease) between writing the start and creating the pod left none, and that attempt is lost (never given a
pod after its start); found sooner than at the step's deadline."""
REASON_DEADLINE = "DeadlineExceeded"
"""The Job controller's reason for a Job past its `activeDeadlineSeconds`, and the kubelet's for such a pod."""


def job_started(job: JSON) -> bool:
    return bool((job.get("status") or {}).get("startTime"))


def job_finished(job: JSON) -> bool:
    """The Job's status names its end (`Complete` or `Failed`): written, so nothing more is owed to it."""
    return job_state(job.get("status") or {})[0] != "active"




def build_step_pod(job: JSON) -> JSON:
    """The Job's one pod: its template as the API server stored it (with the selector labels it added), named as
    the Job (a second create is a 409, never a second pod), controlled by the Job (`observe` counts a result only
    from such a pod)."""
    meta, template = job["metadata"], job["spec"]["template"]
    template_meta = template.get("metadata") or {}
    pod_meta: JSON = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "labels": dict(template_meta.get("labels") or {}),
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
                             "controller": True}],
    }
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template["spec"]}


def started_status(now: datetime) -> JSON:
    """The Job's status before its pod is created: from here on the pod may exist."""
    return {"status": {"startTime": rfc3339(now, timespec="seconds"), "active": 1}}


def ended_status(job: JSON, pod: JSON | None, now: datetime, *, reason: str | None = None,
                 message: str | None = None) -> JSON:
    """The Job's final status from its pod's end (`None`: the pod was lost; `reason`: the operator stopped a pod
    that had not ended), valid as the API server checks a finished Job's status: a start, `SuccessCriteriaMet` with
    `Complete` and a completion time, or `FailureTarget` with `Failed`."""
    status = job.get("status") or {}
    start_text = status.get("startTime") or rfc3339(now, timespec="seconds")
    start = parse_rfc3339(start_text)
    ended = (pod_finished_at(pod) if pod is not None else None) or now
    end = rfc3339(max(ended, start), timespec="seconds")  # never before the start (clocks of node and operator)
    if reason is None and pod is not None and pod_succeeded(pod):
        reached = "Reached expected number of succeeded pods"
        return {"status": {
            "startTime": start_text, "active": 0, "succeeded": 1, "completionTime": end,
            "conditions": [_condition("SuccessCriteriaMet", "CompletionsReached", reached, end),
                           _condition("Complete", "CompletionsReached", reached, end)],
        }}
    if reason == REASON_DEADLINE:
        message = "its pod had not ended at the step's deadline (counted from the Job's start) and was deleted"
    elif reason is not None:
        message = message or reason
    elif pod is None:
        reason, message = REASON_POD_LOST, "its pod is gone without having ended; the operator never makes a second one"
    else:
        reason = pod_failure_reason(pod)
        message = f"its pod failed ({reason})"
    return {"status": {
        "startTime": start_text, "active": 0, "failed": 1,
        "conditions": [_condition("FailureTarget", reason, message, end), _condition("Failed", reason, message, end)],
    }}


def _condition(kind: str, reason: str, message: str, at: str) -> JSON:
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": at, "lastTransitionTime": at}


UpkeepKind = Literal["start", "end", "check"]


@dataclass(frozen=True)
class StepPodUpkeep:
    """What the operator still owes one of its Jobs.

    start: the Job has no `startTime`, so no pod: make it (a pass crashed between the Job's create and its
    start's write).
    end: its pod ended and the Job's status does not say so yet.
    check: read the pod. Due when nothing shows that the pod exists (this process neither made nor saw it: a
    pass crashed between the start's write and the pod's create, or another replica made it) a little after
    the start, and past the step's deadline when the watch has shown no end of it. Gone, the attempt is lost;
    ended, its end is recorded; not ended past the deadline, it is deleted and the attempt failed at its
    deadline; otherwise it is now known.
    """

    kind: UpkeepKind
    namespace: str
    job: JSON
    pod: JSON | None = None


def step_pod_upkeep(jobs: Sequence[JSON], pods: Sequence[JSON], now: datetime) -> list[StepPodUpkeep]:
    """What the run's managed, unfinished Jobs still need, from the Jobs and the pods known (the watches show
    ended pods; the operator's own creates and reads add the others)."""
    known = pods_by_job(pods)
    needs: list[StepPodUpkeep] = []
    for job in jobs:
        if not managed_by_operator(job) or job_finished(job):
            continue
        namespace = str(job["metadata"].get("namespace") or "")
        pod = known.get(str(job["metadata"].get("uid")))
        if not job_started(job):
            needs.append(StepPodUpkeep("start", namespace, job))
        elif pod is not None and pod_ended(pod):
            needs.append(StepPodUpkeep("end", namespace, job, pod))
        elif (due := pod_check_due(job, pod)) is not None and due <= now:
            needs.append(StepPodUpkeep("check", namespace, job))
    return needs


def pods_by_job(pods: Sequence[JSON]) -> dict[str, JSON]:
    """Each Job's pod by the Job's UID (an ended one before any other of the same Job)."""
    found: dict[str, JSON] = {}
    for pod in pods:
        owner = controller_uid(pod)
        if owner and (owner not in found or pod_ended(pod)):
            found[owner] = pod
    return found


def pod_check_due(job: JSON, pod: JSON | None) -> datetime | None:
    """When to read a started Job's pod: soon after the start while nothing shows the pod exists, else past the
    step's deadline (counted from the Job's start, which is before the pod's) and a grace."""
    start = (job.get("status") or {}).get("startTime")
    if not start:
        return None
    if pod is None:
        return parse_rfc3339(start) + POD_EXISTS_CHECK
    deadline = (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("activeDeadlineSeconds")
    return parse_rfc3339(start) + timedelta(seconds=deadline) + POD_CHECK_GRACE if isinstance(deadline, int) else None


def next_pod_check(jobs: Sequence[JSON], pods: Sequence[JSON], now: datetime) -> datetime | None:
    """The earliest pod check of the run's managed, started, unfinished Jobs (a pass then looks again); one
    already due (its pod was there, not yet stopped by its node) a grace from `now`."""
    known = pods_by_job(pods)
    dues = [due if due > now else now + POD_CHECK_GRACE
            for job in jobs if managed_by_operator(job) and job_started(job) and not job_finished(job)
            and (due := pod_check_due(job, known.get(str(job["metadata"].get("uid"))))) is not None]
    return min(dues, default=None)


def refused(error: ApiError) -> bool:
    """The API server refused to create the pod (admission, quota, validation): no pod exists, so none ran."""
    return 400 <= error.status < 500 and error.status not in (409, 429)


async def start_step_pod(api: KubeApi, job: JSON, now: datetime,
                         remember: Callable[[JSON], None] | None = None) -> None:
    """`startTime`, then the pod. A Job whose start is already written is left alone: its pod was (or is being)
    made, and a second one could run the step twice. A pod the API server refuses fails the Job at once, as
    `PodRefused` naming why (nothing ran, so the attempt may be retried whatever the step does)."""
    if job_started(job):
        return
    meta = job["metadata"]
    status_path = JOBS.path(meta["namespace"], meta["name"], "status")
    written = await api.merge_patch(status_path, started_status(now))
    if remember is not None:
        remember(written)
    try:
        pod, _ = await api.create(PODS.path(meta["namespace"]), build_step_pod(job))
    except ApiError as error:
        if not refused(error):
            raise  # the pod may exist: a later check finds out
        log.warning("the pod of Job %s/%s was refused: %s", meta["namespace"], meta["name"], error.message)
        written = await api.merge_patch(status_path, ended_status(
            written, None, now, reason=REASON_POD_REFUSED, message=f"its pod was refused: {error.message}"[:1024]))
        if remember is not None:
            remember(written)
        return
    if remember is not None:
        remember(pod)


async def carry_out(api: KubeApi, need: StepPodUpkeep, now: datetime,
                    remember: Callable[[JSON], None] | None = None) -> None:
    """One upkeep. A start reads the Job first (the watch keeps only part of it, and its start may just have been
    written); a check reads the pod by its name (the Job's)."""
    meta = need.job["metadata"]
    if need.kind == "start":
        job = await api.get(JOBS.path(need.namespace, meta["name"]))
        if job is not None and managed_by_operator(job):
            await start_step_pod(api, job, now, remember)
        return
    pod, reason = need.pod, None
    if need.kind == "check":
        pod = await api.get(PODS.path(need.namespace, meta["name"]))
        if pod is not None and controller_uid(pod) != str(meta.get("uid")):
            pod = None  # another object of that name is not this Job's pod
        if pod is not None and not pod_ended(pod):
            deadline = pod_check_due(need.job, pod)
            if deadline is None or now < deadline:
                if remember is not None:
                    remember(pod)  # it exists: looked at again past the deadline, unless it ends before
                return
            await api.delete(PODS.path(need.namespace, meta["name"]))
            reason = REASON_DEADLINE
    written = await api.merge_patch(JOBS.path(need.namespace, meta["name"], "status"),
                                    ended_status(need.job, pod, now, reason=reason))
    if remember is not None:
        remember(written)


async def keep_step_pods(api: KubeApi, jobs: Sequence[JSON], pods: Sequence[JSON], now: datetime,
                         remember: Callable[[JSON], None] | None = None) -> datetime | None:
    """Carry out what the run's managed Jobs still need; when to look at them again (a pod check due), if ever."""
    for need in step_pod_upkeep(jobs, pods, now):
        await carry_out(api, need, now, remember)
    return next_pod_check(jobs, pods, now)
