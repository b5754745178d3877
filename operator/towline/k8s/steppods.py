"""The pod of a step Job the operator keeps itself (`spec.managedBy: towline.dev/operator`).

Every step attempt stays one Job, owned by its run, labelled and named as
before, and the admission policies still hold it to a step's shape. What the
cluster's Job controller did for it, the operator now does, as Argo and Tekton
do for their own pods: it makes the Job's one pod from the Job's (immutable)
template, named as the Job and controlled by it, and writes the Job's status
(`startTime` with `Complete` or `Failed`) once the pod ended. The Job controller
spent seven API requests per step on that (the pod, three status writes, its
tracking finalizer's removal, two Events); the operator spends three, and a
step's end waits for no controller's batching.

Like the Job controller's own pods, each pod carries a finalizer
(`towline.dev/step-result`) from its creation until its end is written on its
Job: a pod can then not vanish unrecorded, whoever deletes it (`--force` included;
the kubelet stops it and it ends as failed). So a Job without a pod never had
one (a pass stopped between the Job's create and the pod's) and is given it,
and a step's pod is never made twice. The finalizer is removed once the Job
records the end, when the operator deletes the Job (a cancel), and from a pod
of a run that is over or gone.

Jobs without `managedBy` (made by an earlier release) are left to the Job
controller as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from towline.engine.observed import REASON_DEADLINE, REASON_POD_REFUSED
from towline.jsontypes import JSON
from towline.k8s.client import JOBS, PODS, ApiError, KubeApi
from towline.k8s.concurrency import side_by_side
from towline.k8s.labels import STEP_POD_FINALIZER
from towline.k8s.observe import job_finished, managed_by_operator, pod_failure_reason, pod_finished_at
from towline.k8s.owners import controller_uid
from towline.k8s.podphase import pod_ended, pod_succeeded
from towline_connectors.wire import parse_rfc3339, rfc3339

log = logging.getLogger(__name__)

DEADLINE_GRACE = timedelta(seconds=30)
"""How long past a step's deadline, counted from its pod's creation, the operator looks at a pod the watch has shown
no end of. The kubelet stops a pod at its `activeDeadlineSeconds`, counted from the pod's start (a little later);
but a pod never scheduled is stopped by no kubelet. The Job controller failed such a Job at its deadline; so does
the operator."""
PARALLEL_UPKEEP = 8
"""Requests of a run's upkeep under way at once."""


def holds_finalizer(pod: JSON) -> bool:
    return STEP_POD_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])


def deleting(pod: JSON) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def build_step_pod(job: JSON) -> JSON:
    """The Job's one pod: its template as the API server stored it (with the selector labels it added), named as
    the Job (a second create is a 409, never a second pod), controlled by the Job (`observe` counts a result only
    from such a pod), held by the finalizer until its end is recorded."""
    meta, template = job["metadata"], job["spec"]["template"]
    template_meta = template.get("metadata") or {}
    pod_meta: JSON = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "labels": dict(template_meta.get("labels") or {}),
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
                             "controller": True}],
        "finalizers": [STEP_POD_FINALIZER],
    }
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template["spec"]}


def ended_status(job: JSON, pod: JSON | None, now: datetime, *, reason: str | None = None,
                 message: str | None = None) -> JSON:
    """The Job's final status from its pod's end (`reason`: why the operator ended it instead), valid as the API
    server checks a finished Job's status: a start, `SuccessCriteriaMet` with `Complete` and a completion time, or
    `FailureTarget` with `Failed`."""
    created = ((pod or job).get("metadata") or {}).get("creationTimestamp")
    start_text = (job.get("status") or {}).get("startTime") or created or rfc3339(now, timespec="seconds")
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
    if reason is None:
        reason = pod_failure_reason(pod) if pod is not None else "PodFailed"
        message = f"its pod failed ({reason})"
    return {"status": {
        "startTime": start_text, "active": 0, "failed": 1,
        "conditions": [_condition("FailureTarget", reason, message or reason, end),
                       _condition("Failed", reason, message or reason, end)],
    }}


def _condition(kind: str, reason: str, message: str, at: str) -> JSON:
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": at, "lastTransitionTime": at}


UpkeepKind = Literal["ensure", "end", "deadline", "release"]


@dataclass(frozen=True)
class StepPodUpkeep:
    """What the operator still owes one of its Jobs or pods.

    ensure: nothing known shows the Job's pod (a pass stopped between the Job's create and the pod's, or another
    replica made it): read it, and make it if there is none (the finalizer means it never existed).
    end: the pod ended; write that on the Job (read first when the run is over and its Jobs no longer watched),
    then let the pod go.
    deadline: past the step's deadline the watch has shown no end of the pod: read it; if it still has not ended,
    delete it and write the Job's failure at its deadline.
    release: the Job's end is written (or the Job, or the run, is gone): remove the finalizer.
    """

    kind: UpkeepKind
    namespace: str
    name: str
    job: JSON | None = None
    pod: JSON | None = None


def step_pod_upkeep(jobs: Sequence[JSON], pods: Sequence[JSON], now: datetime, *,
                    run_over: bool = False) -> list[StepPodUpkeep]:
    """What the run's managed Jobs and their pods still need, from the Jobs and the pods known (the watches show
    ended pods; the operator's own creates and reads add the others). `run_over`: the run has finished or is
    gone, so every pod of it may go."""
    known = pods_by_job(pods)
    needs: list[StepPodUpkeep] = []
    jobs_by_uid = {str(job["metadata"].get("uid")): job for job in jobs}
    for job in jobs:
        if not managed_by_operator(job) or job_finished(job):
            continue
        meta = job["metadata"]
        namespace, name = str(meta.get("namespace") or ""), str(meta["name"])
        pod = known.get(str(meta.get("uid")))
        if pod is not None and pod_ended(pod):
            needs.append(StepPodUpkeep("end", namespace, name, job, pod))  # (which lets the pod go, too)
        elif run_over:
            continue
        elif pod is None:
            needs.append(StepPodUpkeep("ensure", namespace, name, job))
        elif (due := deadline_due(job, pod)) is not None and due <= now:
            needs.append(StepPodUpkeep("deadline", namespace, name, job, pod))
    ending = {need.name for need in needs if need.kind == "end"}
    for pod in pods:
        if not holds_finalizer(pod) or pod["metadata"]["name"] in ending:
            continue
        meta = pod["metadata"]
        namespace, name = str(meta.get("namespace") or ""), str(meta["name"])
        its_job = jobs_by_uid.get(controller_uid(pod) or "")
        if (its_job is not None and job_finished(its_job)) or (its_job is None and deleting(pod)):
            needs.append(StepPodUpkeep("release", namespace, name, pod=pod))
        elif its_job is None and run_over and pod_ended(pod):
            # A pod that ended after its run (a gate's notification): its Job, read, gets its end first.
            needs.append(StepPodUpkeep("end", namespace, name, pod=pod))
    return needs


def pods_by_job(pods: Sequence[JSON]) -> dict[str, JSON]:
    """Each Job's pod by the Job's UID (an ended one before any other of the same Job)."""
    found: dict[str, JSON] = {}
    for pod in pods:
        owner = controller_uid(pod)
        if owner and (owner not in found or pod_ended(pod)):
            found[owner] = pod
    return found


def deadline_due(job: JSON, pod: JSON) -> datetime | None:
    """When a pod that has not ended is past its step's deadline (from the pod's creation) and the grace."""
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    deadline = (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("activeDeadlineSeconds")
    if not created or not isinstance(deadline, int):
        return None
    return parse_rfc3339(created) + timedelta(seconds=deadline) + DEADLINE_GRACE


def next_deadline(jobs: Sequence[JSON], pods: Sequence[JSON], now: datetime) -> datetime | None:
    """The earliest deadline check of the run's managed, unfinished Jobs whose pods have not ended (a pass then
    looks again); one already due (its pod was there, not yet stopped) a grace from `now`."""
    known = pods_by_job(pods)
    dues = [due if due > now else now + DEADLINE_GRACE
            for job in jobs if managed_by_operator(job) and not job_finished(job)
            and (pod := known.get(str(job["metadata"].get("uid")))) is not None and not pod_ended(pod)
            and (due := deadline_due(job, pod)) is not None]
    return min(dues, default=None)


def refused(error: ApiError) -> bool:
    """The API server refused to create the pod (admission, quota, validation): no pod exists, so none ran."""
    return 400 <= error.status < 500 and error.status not in (409, 429)


Told = Callable[[JSON], None]
"""Hands an answer of the API server to the operator's cache: `learned` for a create's or a read's, `wrote` for
its own write's (runtime/cache.py)."""


async def start_step_pod(api: KubeApi, job: JSON, now: datetime, learned: Told | None = None,
                         wrote: Told | None = None) -> None:
    """The Job's pod (a 409 adopts the one a pass before made). A pod the API server refuses fails the Job at once,
    as `PodRefused` naming why: nothing ran, so the attempt may be retried whatever the step does."""
    meta = job["metadata"]
    try:
        pod, _ = await api.create(PODS.path(meta["namespace"]), build_step_pod(job))
    except ApiError as error:
        if not refused(error):
            raise  # the pod may exist: the next pass reads it
        log.warning("the pod of Job %s/%s was refused: %s", meta["namespace"], meta["name"], error.message)
        written = await api.merge_patch(JOBS.path(meta["namespace"], meta["name"], "status"), ended_status(
            job, None, now, reason=REASON_POD_REFUSED, message=f"its pod was refused: {error.message}"[:1024]))
        if wrote is not None:
            wrote(written)
        return
    if controller_uid(pod) != str(meta.get("uid")):
        raise ApiError(409, f"pod {meta['name']} exists but is not controlled by its Job")
    if learned is not None:
        learned(pod)


async def release_step_pod(api: KubeApi, namespace: str, name: str) -> JSON | None:
    """Remove the operator's finalizer from the pod, other finalizers staying; the pod as it is now (None: gone)."""
    try:
        pod: JSON = await api.request("PATCH", PODS.path(namespace, name), body={
            "metadata": {"$deleteFromPrimitiveList/finalizers": [STEP_POD_FINALIZER]}},
            content_type="application/strategic-merge-patch+json")
    except ApiError as error:
        if error.status != 404:
            raise
        return None
    return pod


async def carry_out(api: KubeApi, need: StepPodUpkeep, now: datetime, learned: Told | None = None,
                    wrote: Told | None = None) -> None:
    """One upkeep. An ensure reads the pod by name, and the Job (the watch keeps only part of it) to make a missing
    pod; a deadline reads the pod again (its end may be on its way)."""
    path = JOBS.path(need.namespace, need.name)
    if need.kind == "ensure":
        pod = await api.get(PODS.path(need.namespace, need.name))
        if pod is None:
            job = await api.get(path)
            if job is not None and managed_by_operator(job) and not job_finished(job):
                await start_step_pod(api, job, now, learned, wrote)
        elif learned is not None:
            learned(pod)
        return
    job, pod, reason = need.job, need.pod, None
    if job is None and need.kind == "end":
        job = await api.get(path)
        if job is not None and (not managed_by_operator(job) or job_finished(job)):
            job = None  # nothing to write on: only the finalizer is left
    if need.kind == "deadline":
        pod = await api.get(PODS.path(need.namespace, need.name))
        if pod is not None and not pod_ended(pod):
            await api.delete(PODS.path(need.namespace, need.name))
            reason = REASON_DEADLINE
    if need.kind != "release" and job is not None:
        written = await api.merge_patch(f"{path}/status", ended_status(
            job, pod, now, reason=reason,
            message="its pod had not ended at the step's deadline and was deleted" if reason else None))
        if wrote is not None:
            wrote(written)
    if pod is None:
        return
    released = await release_step_pod(api, need.namespace, need.name)
    if released is not None and wrote is not None and pod_ended(released):
        wrote(released)  # (a pod that has not ended is outside the watch, which would never echo the write)


async def keep_step_pods(api: KubeApi, jobs: Sequence[JSON], pods: Sequence[JSON], now: datetime, *,
                         learned: Told | None = None, wrote: Told | None = None, run_over: bool = False,
                         ) -> datetime | None:
    """Carry out what the run's managed Jobs and pods still need, side by side (a fan-out's pods end together);
    when to look at them again (a deadline), if ever."""
    await side_by_side((carry_out(api, need, now, learned, wrote)
                        for need in step_pod_upkeep(jobs, pods, now, run_over=run_over)), PARALLEL_UPKEEP)
    return None if run_over else next_deadline(jobs, pods, now)
