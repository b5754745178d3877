"""What the watches showed of each run's Jobs, step pods and Approvals, so a reconcile lists nothing.

Fed by watch events (Jobs, pods and Approvals from the operator's own child watches) and by
the answers to the operator's own creates (client-go's mutation cache: a Job this process just
created is in the cache before its watch event arrives, so it is never taken
for a vanished one; an answer only fills a gap, so it never undoes a newer watch
event, and resourceVersions are never ordered). One `Store` (towline.k8s.indexer) keyed by kind, namespace and
name, indexed by the run label, exactly as the live list in `towline.k8s.observe` selects (a relabelled object
moves to the other run), and for pods by the Job that controls them; handed to the same `build_observed`.

Trust only where it is safe (client-go's expectations, in the other
direction): when the run's status expects something the cache lacks — a
running step's Job or Approval, or the pod of a finished Job whose result has
not been recorded — `covers` says no and the reconcile lists live instead.
A cache that is merely behind shows an older world; the late watch event
enqueues the run again.

Keeps a trimmed copy of each object: names, labels, owners, the status the
observation reads, and of a spec only Secret volume names and (init) container
names and images; never an environment.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

from towline.api.run import WorkflowRunStatus
from towline.engine.observed import JobState
from towline.handlers.context import Key
from towline.jsontypes import JSON
from towline.k8s.indexer import Index, Store
from towline.k8s.labels import ANNOTATION_STEP_ID, LABEL_RUN
from towline.k8s.observe import (
    attempt_state,
    job_finished,
    managed_by_operator,
    secret_volumes,
)
from towline.k8s.owners import controller_uid, controlling_job
from towline.k8s.podphase import pod_ended, pod_succeeded
from towline.k8s.steppods import holds_finalizer

KINDS = ("Job", "Pod", "Approval")


ChildKey = tuple[str, str, str]
"""(kind, namespace, name) of a run's Job, step pod or Approval."""


def _run_of(key: ChildKey, body: JSON) -> Key | None:
    run = ((body.get("metadata") or {}).get("labels") or {}).get(LABEL_RUN)
    return (key[1], run) if run else None


BY_RUN: Index[ChildKey, JSON, Key] = Index("run", _run_of)
"""A run's children by (namespace, run), by its label as the live list selects them (a relabelled object moves)."""
BY_CONTROLLER: Index[ChildKey, JSON, tuple[str, str | None]] = Index(
    "controller", lambda key, body: (key[1], controller_uid(body)) if key[0] == "Pod" else None)
"""A pod by (namespace, the UID of the Job that controls it): what `covers` asks for a finished Job, without going
through every pod of the run."""


def _children() -> Store[ChildKey, JSON]:
    return Store(BY_RUN, BY_CONTROLLER)


def trim(kind: str, body: JSON) -> JSON:
    """The fields `build_observed` and `covers` read; nothing else is kept."""
    meta = body.get("metadata") or {}
    kept: JSON = {"metadata": {key: meta[key] for key in (
        "name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences", "creationTimestamp",
        "deletionTimestamp", "finalizers") if key in meta}}
    if kind == "Job":
        annotations = meta.get("annotations") or {}
        if ANNOTATION_STEP_ID in annotations:
            kept["metadata"]["annotations"] = {ANNOTATION_STEP_ID: annotations[ANNOTATION_STEP_ID]}
        kept["status"] = body.get("status") or {}
        spec = body.get("spec") or {}
        template = (spec.get("template") or {}).get("spec") or {}
        kept["spec"] = {"template": {"spec": {**container_images(template), **{
            key: template[key] for key in ("activeDeadlineSeconds",) if key in template}}}}
        if "managedBy" in spec:
            kept["spec"]["managedBy"] = spec["managedBy"]
    elif kind == "Pod":
        status = body.get("status") or {}
        kept["status"] = {key: status[key] for key in ("phase", "reason", "containerStatuses",
                                                       "initContainerStatuses") if key in status}
        kept["spec"] = {"volumes": secret_volumes(body), **container_images(body.get("spec") or {})}
    else:
        kept["spec"] = body.get("spec") or {}
        kept["status"] = body.get("status") or {}
    return kept


def container_images(spec: JSON) -> JSON:
    """Each container's and init container's name and image: what `stepimage.foreign_run` compares and what tells
    a user step type's pod (it has the runner's `prepare`) from a built-in's; never an environment."""
    kept: JSON = {"containers": _names_and_images(spec.get("containers"))}
    if spec.get("initContainers"):
        kept["initContainers"] = _names_and_images(spec["initContainers"])
    return kept


def _names_and_images(containers: Any) -> list[JSON]:
    return [{"name": c.get("name"), "image": c.get("image")} for c in containers or []]


class ChildCache:
    """The run's children as the watches showed them: one store indexed by run and by controlling Job."""

    def __init__(self) -> None:
        self._objects: Store[ChildKey, JSON] = _children()
        self._awaited: dict[ChildKey, str] = {}
        """The resourceVersion of the operator's own last write of an object (a Job's status, a pod's finalizer),
        whose answer the cache holds: the watch's events before that write's echo are older, and ignored."""
        self._deleted: dict[Key, set[str]] = {}
        """Per run, the UIDs the watch showed deleted (kept until the run is forgotten): a late answer to a list
        or create must not bring one back."""

    def wrote(self, kind: str, body: JSON) -> None:
        """The answer to the operator's own write of an object (not a create): newer than anything the watch has
        shown of it, and kept until the watch shows that very version (client-go's expectations, as for runs in
        `runstore`)."""
        meta = body.get("metadata") or {}
        if not (meta.get("labels") or {}).get(LABEL_RUN):
            return
        key = (kind, meta["namespace"], meta["name"])
        self._objects.put(key, trim(kind, body))
        self._awaited[key] = str(meta.get("resourceVersion") or "")

    def saw(self, kind: str, body: JSON, *, listed: bool = False) -> bool:
        """A watch event: the newest state of the object (the watch delivers in order).

        True when what a reconcile would observe changed: a Job that is new or whose attempt's state
        (active, succeeded, failed; `observe.attempt_state`) changed; a pod whose end ended its Job's
        attempt before the Job's status said so; any change of an Approval. A Job's other updates (its
        `Complete` written after its pod's success was seen) are no reason for a pass.
        """
        meta = body.get("metadata") or {}
        key = (kind, meta.get("namespace", ""), meta.get("name", ""))
        awaited = self._awaited.get(key)
        if awaited is not None:
            if not listed and str(meta.get("resourceVersion") or "") != awaited:
                return False  # from before the operator's own write, whose answer the cache holds
            del self._awaited[key]  # the echo (or a (re-)list, which shows the newest)
        return self._keep(kind, body, answer=False)

    def learned(self, kind: str, body: JSON) -> None:
        """An answer to the operator's own create or list: fills a gap, never replaces what the watch showed.

        The watch may have shown a newer state while the request was under way, and resourceVersions are
        opaque (never ordered), so an object already cached under the same UID, or one the watch showed
        deleted, is left as the watch has it; its later events keep it current.
        """
        self._keep(kind, body, answer=True)

    def _keep(self, kind: str, body: JSON, *, answer: bool) -> bool:
        meta = body.get("metadata") or {}
        run = (meta.get("labels") or {}).get(LABEL_RUN)
        if not run:
            return False
        key = (kind, meta["namespace"], meta["name"])
        cached = self._objects.get(key)
        same = cached is not None and cached["metadata"].get("uid") == meta.get("uid")
        if answer and (same or meta.get("uid") in self._deleted.get((meta["namespace"], run), ())):
            return False
        kept = trim(kind, body)
        if kind == "Pod":
            ended = pod_ended(kept) and not (same and cached is not None and pod_ended(cached))
            self._objects.put(key, kept)
            return ended and self._ends_attempt(key, kept)
        if kind != "Job" or not same:
            self._objects.put(key, kept)
            return True
        assert cached is not None
        before = self._attempt_state(key[1], cached)
        self._objects.put(key, kept)
        return before != self._attempt_state(key[1], kept)

    def gone(self, kind: str, body: JSON, *, remember: bool = True) -> None:
        """The watch showed the object deleted. `remember`: keep its UID until the run is forgotten (a pass may
        still list or create the run's children); not for a run finished or gone, which would keep it for good
        (the garbage collector deletes a deleted run's children after the run was forgotten)."""
        meta = body.get("metadata") or {}
        run = (meta.get("labels") or {}).get(LABEL_RUN, "")
        key = (kind, meta.get("namespace", ""), meta.get("name", ""))
        cached = self._objects.get(key)
        if cached is not None and cached["metadata"].get("uid") in (None, meta.get("uid")):
            self._objects.pop(key)
            self._awaited.pop(key, None)
        if meta.get("uid") and run and remember:
            self._deleted.setdefault((key[1], run), set()).add(meta["uid"])

    def cached(self, kind: str, body: JSON) -> JSON | None:
        """What the cache holds of this very object (same name and UID), if anything."""
        meta = body.get("metadata") or {}
        held = self._objects.get((kind, meta.get("namespace", ""), meta.get("name", "")))
        return held if held is not None and held["metadata"].get("uid") == meta.get("uid") else None

    def forget_run(self, run: Key) -> None:
        """The run finished or went: its children are of no more use, but for the pods the operator still holds
        (towline.k8s.steppods), which its pass must still let go. The watch's event of a finished run (the echo
        of its last write, a re-list) can land after such a pod's end woke the run and before that pass: the
        pod, forgotten then, sent no other event, and kept its finalizer and its Job unfinished for good."""
        for key, body in self._objects.by(BY_RUN, run):
            if key[0] == "Pod" and holds_finalizer(body):
                continue
            self._objects.pop(key)
            self._awaited.pop(key, None)
        self._deleted.pop(run, None)

    def children(self, run: Key) -> tuple[list[JSON], list[JSON], list[JSON]]:
        found: dict[str, list[JSON]] = {kind: [] for kind in KINDS}
        for (kind, _, _), body in self._objects.by(BY_RUN, run):
            found[kind].append(body)
        return found["Job"], found["Pod"], found["Approval"]

    def active_jobs(self, run: Key, *, at_most: int) -> int:
        """How many Jobs of the run the watch shows with an attempt not ended yet (no terminal condition, no
        succeeded pod), counting no further than `at_most`: asked on every child event, it stops as soon as the
        answer is known instead of walking a wide run's every child."""
        active = (body for (kind, _, _), body in self._objects.by(BY_RUN, run)
                  if kind == "Job" and self._attempt_state(run[0], body)[0] == "active")
        return sum(1 for _ in itertools.islice(active, at_most))

    def covers(self, run: Key, status: WorkflowRunStatus) -> bool:
        """Whether the cache holds everything the run's status says exists (else: list live)."""
        namespace = run[0]
        for step in status.steps:
            if step.phase != "Running":
                continue
            if step.approval_name and self._of_run(run, ("Approval", namespace, step.approval_name)) is None:
                return False
            if not step.job_name:
                continue
            job = self._of_run(run, ("Job", namespace, step.job_name))
            if job is None:
                return False
            if job_finished(job) and not self._has_finished_pod(run, job):
                return False
        return True

    def __len__(self) -> int:
        return len(self._objects)

    def remembered_deletions(self) -> int:
        """How many deleted objects' UIDs are kept (for tests: they must not outlive their runs)."""
        return sum(len(uids) for uids in self._deleted.values())

    def _of_run(self, run: Key, key: ChildKey) -> JSON | None:
        """The object under `key` if it is labelled for `run` (another run's object of that name is not this
        run's)."""
        body = self._objects.get(key)
        return body if body is not None and _run_of(key, body) == run else None

    def _ends_attempt(self, key: ChildKey, pod: JSON) -> bool:
        """Whether the end of `pod` ends its Job's attempt before the Job's status says so: a success always (a
        Job not seen yet is not taken as ended: its create's answer or its first event may arrive after the pod's
        end, and neither wakes the run by itself then); a failure when the operator keeps the Job
        (towline.k8s.steppods), since the Job controller writes its own Jobs' failures, which then wake the run."""
        owner, run = controlling_job(pod), _run_of(key, pod)
        if owner is None or run is None:
            return False
        job = self._of_run(run, ("Job", key[1], owner.name))
        if job is None or job["metadata"].get("uid") != owner.uid:
            return pod_succeeded(pod)
        if job_finished(job):
            return False
        return pod_succeeded(pod) or managed_by_operator(job)

    def _attempt_state(self, namespace: str, job: JSON) -> tuple[JobState, str | None]:
        """The Job's attempt state with the pod the cache holds for it (any pod it controls: a wake-up hint;
        what counts is decided by `build_observed`)."""
        pods = self._objects.by(BY_CONTROLLER, (namespace, job["metadata"].get("uid")))
        return attempt_state(job, next((pod for _, pod in pods if pod_ended(pod)), None))

    def _has_finished_pod(self, run: Key, job: JSON) -> bool:
        # By controller, as build_observed matches them: a look-alike pod with the Job's labels must not
        # make the cache look complete while the real pod's result is missing.
        for key, pod in self._objects.by(BY_CONTROLLER, (run[0], job["metadata"].get("uid"))):
            if _run_of(key, pod) != run:
                continue
            with contextlib.suppress(AttributeError, TypeError, KeyError):
                if any((c.get("state") or {}).get("terminated") for c in pod["status"]["containerStatuses"]):
                    return True
        return False
