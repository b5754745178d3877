"""Read what is true in the world for one run: its Jobs, their pods' results, its Approvals.

Children are found by label, never from memory, and count only when the run
controls them: a Job whose controller ownerReference is the run's UID, a pod
controlled by such a Job (whose result counts only if it ran the image its Job
asked for: towline.k8s.stepimage), an Approval whose name is the gate's deterministic
name and whose spec.runName, spec.step and controller ownerReference all name
this run. Anything else wearing the run's label is ignored. A step's result is the JSON
document the runner wrote to its termination message (an `auth` failure naming
Secrets its pod mounts marks the Job REASON_UNMOUNTABLE); a container that left
no document gets a result synthesised here that names the cause. Never reads
Secret values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from towline.engine.naming import approval_name
from towline.engine.observed import (
    REASON_UNMOUNTABLE,
    ApprovalObservation,
    JobObservation,
    JobState,
    Observed,
    StepResult,
)
from towline.jsontypes import JSON
from towline.k8s.client import APPROVALS, JOBS, PODS, KubeApi
from towline.k8s.labels import ANNOTATION_STEP_ID, LABEL_ATTEMPT, LABEL_NOTIFICATION, LABEL_RUN, STEP_JOB_MANAGER
from towline.k8s.owners import controller_uid
from towline.k8s.podphase import pod_succeeded
from towline.k8s.stepimage import foreign_run, refused_result
from towline_connectors.wire import parse_rfc3339
from towline_step.protocol import RESULT_LIMIT_BYTES, ResultDocument, missing_result, read_result_message


async def observe_run(api: KubeApi, namespace: str, run_name: str, run_uid: str) -> Observed:
    """What the run controls among its labelled children (one list per kind)."""
    jobs, pods, approvals = await list_children(api, namespace, run_name)
    return build_observed(jobs, pods, approvals, run_name=run_name, run_uid=run_uid)


async def list_children(api: KubeApi, namespace: str, run_name: str) -> tuple[list[JSON], list[JSON], list[JSON]]:
    """One list per kind, filtered by the run's label: the run's Jobs, pods and Approvals (owners unchecked)."""
    selector = f"{LABEL_RUN}={run_name}"
    jobs = await api.list(JOBS.path(namespace), label_selector=selector)
    pods = await api.list(PODS.path(namespace), label_selector=selector)
    approvals = await api.list(APPROVALS.path(namespace), label_selector=selector)
    return jobs, pods, approvals


def build_observed(
    jobs: Sequence[JSON], pods: Sequence[JSON], approvals: Sequence[JSON], *, run_name: str, run_uid: str,
    kept: KeptObservations | None = None,
) -> Observed:
    owned_jobs = [job for job in jobs if controller_uid(job) == run_uid]
    job_names_by_uid = {job["metadata"].get("uid"): job["metadata"]["name"] for job in owned_jobs}
    pods_by_job: dict[str, JSON] = {}
    for pod in pods:
        job_name = job_names_by_uid.get(controller_uid(pod))
        if job_name:
            pods_by_job[job_name] = pod
    observed_jobs: dict[tuple[str, int], JobObservation] = {}
    for job in owned_jobs:
        its_pod = pods_by_job.get(job["metadata"]["name"])
        observation = observe_job(job, its_pod) if kept is None else kept.observe(job, its_pod)
        if observation is not None:
            observed_jobs[(observation.step_id, observation.attempt)] = observation
    observed_approvals: dict[str, ApprovalObservation] = {}
    for approval in approvals:
        if belongs_to_gate(approval, run_name, run_uid):
            observation_a = observe_approval(approval)
            observed_approvals[observation_a.step_id] = observation_a
    return Observed(jobs=observed_jobs, approvals=observed_approvals)


def belongs_to_gate(approval: JSON, run_name: str, run_uid: str) -> bool:
    """The run's own Approval for the gate it names: by name, run, step and controller, all at once.

    Labels alone prove nothing: whoever can write them could point another run's decision here.
    """
    spec = approval.get("spec") or {}
    step = spec.get("step")
    return (
        isinstance(step, str)
        and spec.get("runName") == run_name
        and approval["metadata"]["name"] == approval_name(run_name, step)
        and controller_uid(approval) == run_uid
    )


class KeptObservations:
    """`observe_job`, worked out once per version of a Job and its pod (one per operator process).

    A pass observes every attempt of its run, and a fan-out pass after each step's end read again the result
    document of every pod, through the step protocol's strict parser: most of such a pass's CPU. An observation
    depends on nothing but the two bodies, and an object at one resourceVersion is one content; a body without
    a uid and version (none from the API server) is observed every time.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        """Observations kept (a few per step in flight: enough for hundreds of runs at once)."""
        self._kept: dict[tuple[str, ...], JobObservation | None] = {}

    def observe(self, job: JSON, pod: JSON | None) -> JobObservation | None:
        key = _versions(job) + (_versions(pod) if pod is not None else ("-", "-"))
        if "" in key:
            return observe_job(job, pod)
        if key in self._kept:
            return self._kept[key]
        observation = self._kept[key] = observe_job(job, pod)
        if len(self._kept) > self.size:
            del self._kept[next(iter(self._kept))]  # the oldest
        return observation


def _versions(body: JSON) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")


def observe_job(job: JSON, pod: JSON | None) -> JobObservation | None:
    labels = job["metadata"].get("labels", {})
    annotations = job["metadata"].get("annotations", {})
    step_id = annotations.get(ANNOTATION_STEP_ID)
    attempt_text = labels.get(LABEL_ATTEMPT)
    if not step_id or not attempt_text or LABEL_NOTIFICATION in labels:
        return None  # a gate's notification Job is no attempt of any step
    status = job.get("status", {})
    state, reason = attempt_state(job, pod)
    result = parse_result(pod) if pod is not None else None
    if pod is not None and result is not None and (foreign := foreign_run(job, pod)) is not None:
        result = refused_result(pod, foreign)
    if state == "failed" and pod is not None and result is not None and lacked_its_secrets(result, pod):
        reason = REASON_UNMOUNTABLE
    # A failed Job with no result document (deadline, eviction, lost node) stays result=None: only
    # the engine knows whether the step mutates, and so whether it may have had a side effect.
    return JobObservation(
        step_id=step_id,
        attempt=int(attempt_text),
        job_name=job["metadata"]["name"],
        state=state,
        result=result,
        started_at=_time(status.get("startTime")),
        finished_at=(_time(status.get("completionTime")) or _condition_time(status, "Failed")
                     or (pod_finished_at(pod) if pod is not None else None)),
        reason=reason,
        image=ran_image(pod) if pod is not None else None,
    )


def ran_image(pod: JSON) -> str | None:
    """The step container's image as the kubelet ran it (`imageID`, by digest), for the attempt's record."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == "step" and isinstance(status.get("imageID"), str) and status["imageID"]:
            return str(status["imageID"])
    return None


def lacked_its_secrets(result: StepResult, pod: JSON) -> bool:
    """The runner failed the attempt because Secrets its pod mounts are missing (credentials need repair).

    Only an `auth` failure naming Secrets that very pod mounts counts: the document is the
    pod's, so whatever wrote it can at worst pause its own run, as any `auth` failure does.
    """
    mounted = {(volume.get("secret") or {}).get("secretName") for volume in secret_volumes(pod)}
    named = set(result.missing_secrets)
    return not result.ok and result.error_class == "auth" and bool(named) and named <= mounted - {None}


def secret_volumes(pod: JSON) -> list[JSON]:
    """The pod's Secret volumes (names only: a volume never holds a value)."""
    return [volume for volume in (pod.get("spec") or {}).get("volumes") or [] if volume.get("secret")]


def job_state(status: Mapping[str, Any]) -> tuple[JobState, str | None]:
    """active / succeeded / failed from the Job controller's terminal conditions."""
    for condition in status.get("conditions", []) or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded", None
        if condition.get("type") == "Failed":
            return "failed", condition.get("reason")
    return "active", None


def job_finished(job: Mapping[str, Any]) -> bool:
    """The Job's status names its end (`Complete` or `Failed`): written, so its pod may go."""
    return job_state(job.get("status") or {})[0] != "active"


def attempt_state(job: JSON, pod: JSON | None) -> tuple[JobState, str | None]:
    """The attempt's state: its Job's terminal condition, or "succeeded" as soon as its pod succeeded.

    A step Job runs one pod (`backoffLimit: 0`, `restartPolicy: Never`), so once that pod has succeeded the
    Job's outcome is settled; the Job controller only writes it down about two seconds later (it batches a
    Job's pod events by a second, twice: `SuccessCriteriaMet`, then `Complete` once the pod's tracking
    finalizer is gone). Following the pod, as Argo and Tekton follow the pods they create, takes that wait
    out of every step. For a Job the Job controller keeps (one an earlier release made) a failure still waits
    for the Job: its condition names the cause (`DeadlineExceeded` when the Job controller stopped the pod),
    which the pod, deleted by then, does not. A Job the operator keeps (`towline.k8s.steppods`) has failed as
    soon as its pod has: the kubelet, which stops a pod at its deadline, names the cause on the pod.
    """
    state, reason = job_state(job.get("status") or {})
    if state == "active" and pod is not None and pod_succeeded(pod):
        return "succeeded", None
    if state == "active" and pod is not None and managed_by_operator(job) and \
            (pod.get("status") or {}).get("phase") == "Failed":
        return "failed", pod_failure_reason(pod)
    return state, reason


def managed_by_operator(job: JSON) -> bool:
    """The Job's pod and status are the operator's to keep (`towline.k8s.steppods`); the Job controller leaves such
    a Job alone."""
    return (job.get("spec") or {}).get("managedBy") == STEP_JOB_MANAGER


def pod_failure_reason(pod: JSON) -> str:
    """Why a failed pod failed, as the kubelet says (`DeadlineExceeded` past `activeDeadlineSeconds`, `Evicted`),
    else `PodFailed` (a container exited non-zero: its result document says more)."""
    return str((pod.get("status") or {}).get("reason") or "PodFailed")


def pod_finished_at(pod: JSON) -> datetime | None:
    """When the pod's last container ended, as the kubelet reported it."""
    ends = [_time(terminated.get("finishedAt"))
            for status in (pod.get("status") or {}).get("containerStatuses") or []
            if (terminated := (status.get("state") or {}).get("terminated"))]
    return max((end for end in ends if end is not None), default=None)


def parse_result(pod: JSON) -> StepResult | None:
    """The step's document from its container's termination message, read strictly by the step protocol.

    A user step type's pod runs the runner's `prepare` first: when that failed (the pod never became
    isolated, a Secret is missing) its document is the attempt's result and the user's container never ran.
    """
    status = pod.get("status") or {}
    for container in status.get("initContainerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode") != 0:
            return _terminated_result(terminated, user_container=False)
    user_type = bool((pod.get("spec") or {}).get("initContainers"))
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return _terminated_result(terminated, user_container=user_type)
    return None


def _terminated_result(terminated: Mapping[str, Any], *, user_container: bool) -> StepResult | None:
    message = terminated.get("message")
    if not message:
        return no_document(terminated) if user_container else None
    document = read_result_message(str(message))
    if document is not None:
        return step_result(document)
    return not_a_document(str(message)) if user_container else container_failure(terminated)


def not_a_document(message: str) -> StepResult:
    """A user's container left a termination message that is not JSON: say so, never echo it.

    The text is the user's code's (it holds the step's credentials); only its size is told. The kubelet
    keeps the last 4096 bytes of the file, so a longer document arrives cut and reads as no JSON at all.
    """
    size = len(message.encode("utf-8", "surrogatepass"))
    cut = (f"; at {size} bytes it was likely cut by the kubelet, which keeps at most {RESULT_LIMIT_BYTES} bytes"
           if size >= RESULT_LIMIT_BYTES else "")
    return StepResult(
        ok=False, output=None, error_class="permanent", retryable=False, retry_after_seconds=None, usage=None,
        message=f"the step's container wrote a termination message that is not a JSON result document ({size} "
        f"bytes, not shown){cut}; write one document of at most {RESULT_LIMIT_BYTES} bytes (docs/step-protocol.md)",
    )


def no_document(terminated: Mapping[str, Any]) -> StepResult | None:
    """A user's container ended without a result document: its exit code says what the protocol allows.

    Killed by the kernel or the kubelet (OOMKilled, a deadline) stays None: the engine decides, as for
    the runner, whether a mutating step may have had an effect. Otherwise towline_step.protocol's rule.
    """
    code = terminated.get("exitCode")
    if terminated.get("reason") not in (None, "Completed", "Error") or not isinstance(code, int):
        return None
    return step_result(missing_result(code))


def container_failure(terminated: Mapping[str, Any]) -> StepResult:
    """The container never produced a result document: the runtime's own words say why.

    With a real kubelet that is e.g. StartError (the runner image lacks the
    command); the runner itself only ever writes JSON, redacted.
    """
    reason = terminated.get("reason") or "Error"
    text = str(terminated.get("message") or "").strip()[:512]
    return StepResult(
        ok=False, output=None, error_class="permanent",
        message=f"the step's container failed without a result ({reason}, exit code "
        f"{terminated.get('exitCode')}): {text}",
        retryable=False, retry_after_seconds=None, usage=None,
    )


def step_result(document: ResultDocument) -> StepResult:
    """The protocol's checked document as the engine's value (error classes as their names)."""
    return StepResult(
        ok=document.ok, output=document.output,
        error_class=None if document.error_class is None else document.error_class.value,
        message=document.message, retryable=document.retryable,
        retry_after_seconds=document.retry_after_seconds, usage=document.usage,
        missing_secrets=document.missing_secrets,
    )


def observe_approval(approval: JSON) -> ApprovalObservation:
    spec = approval.get("spec", {})
    return ApprovalObservation(
        step_id=spec.get("step", ""),
        name=approval["metadata"]["name"],
        decision=spec.get("decision"),
        decided_by=spec.get("decidedBy"),
        decided_at=decision_time(approval),
        reason=spec.get("reason"),
        expires_at=_time(spec.get("expiresAt")),
        message=str(spec.get("message") or ""),
    )


def decision_time(approval: JSON) -> datetime | None:
    """When the operator first saw the decision, as it recorded it in status.

    Only the operator writes an Approval's status; everything else on the object
    (spec, managedFields) is the decider's to write, so it never says when. None
    until recorded: the engine then takes the time of this observation.
    """
    return _time((approval.get("status") or {}).get("decidedAt"))


def _time(text: str | None) -> datetime | None:
    return parse_rfc3339(text) if text else None


def _condition_time(status: Mapping[str, Any], kind: str) -> datetime | None:
    for condition in status.get("conditions", []) or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return _time(condition.get("lastTransitionTime"))
    return None
