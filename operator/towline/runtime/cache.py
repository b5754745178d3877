"""What the watches showed of each run's Jobs, step pods and Approvals, so a reconcile lists nothing.

Fed by the watch events kopf hands the runtime and by the answers to the
operator's own creates (client-go's mutation cache: a Job this process just
created is in the cache before its watch event arrives, so it is never taken
for a vanished one; an answer only fills a gap, so it never undoes a newer watch
event, and resourceVersions are never ordered). Indexed by the run label, exactly as the live list in
`towline.k8s.observe` selects, and handed to the same `build_observed`.

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
from dataclasses import dataclass, field
from typing import Any

from towline.api.run import WorkflowRunStatus
from towline.handlers.context import Key
from towline.k8s.objects import ANNOTATION_STEP_ID, LABEL_RUN
from towline.k8s.observe import controller_uid, job_state, secret_volumes

JSON = dict[str, Any]
KINDS = ("Job", "Pod", "Approval")


@dataclass
class RunChildren:
    jobs: dict[str, JSON] = field(default_factory=dict)
    pods: dict[str, JSON] = field(default_factory=dict)
    approvals: dict[str, JSON] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    """UIDs the watch showed deleted (kept until the run is forgotten)."""

    def of_kind(self, kind: str) -> dict[str, JSON]:
        return {"Job": self.jobs, "Pod": self.pods, "Approval": self.approvals}[kind]

    def __bool__(self) -> bool:
        return bool(self.jobs or self.pods or self.approvals)


def trim(kind: str, body: JSON) -> JSON:
    """The fields `build_observed` and `covers` read; nothing else is kept."""
    meta = body.get("metadata") or {}
    kept: JSON = {"metadata": {key: meta[key] for key in ("name", "namespace", "uid", "resourceVersion", "labels",
                                                           "ownerReferences") if key in meta}}
    if kind == "Job":
        annotations = meta.get("annotations") or {}
        if ANNOTATION_STEP_ID in annotations:
            kept["metadata"]["annotations"] = {ANNOTATION_STEP_ID: annotations[ANNOTATION_STEP_ID]}
        kept["status"] = body.get("status") or {}
        template = ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
        kept["spec"] = {"template": {"spec": container_images(template)}}
    elif kind == "Pod":
        status = body.get("status") or {}
        kept["status"] = {key: status[key] for key in ("containerStatuses", "initContainerStatuses") if key in status}
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
    def __init__(self) -> None:
        self._runs: dict[Key, RunChildren] = {}

    def saw(self, kind: str, body: JSON) -> bool:
        """A watch event: the newest state of the object (the watch delivers in order).

        True when what a reconcile would observe changed: a Job that is new or whose state
        (active, succeeded, failed) changed; any change of a pod or an Approval. A Job's
        other updates (a pod became ready) are no reason for a pass.
        """
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
        children = self._runs.setdefault((meta["namespace"], run), RunChildren())
        objects = children.of_kind(kind)
        cached = objects.get(meta["name"])
        same = cached is not None and cached["metadata"].get("uid") == meta.get("uid")
        if answer and (same or meta.get("uid") in children.deleted):
            return False
        kept = objects[meta["name"]] = trim(kind, body)
        if kind != "Job" or cached is None or cached["metadata"].get("uid") != meta.get("uid"):
            return True
        return job_state(cached.get("status") or {}) != job_state(kept.get("status") or {})

    def gone(self, kind: str, body: JSON) -> None:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), (meta.get("labels") or {}).get(LABEL_RUN, ""))
        children = self._runs.get(key)
        if children is None:
            return
        cached = children.of_kind(kind).get(meta.get("name", ""))
        if cached is not None and cached["metadata"].get("uid") in (None, meta.get("uid")):
            del children.of_kind(kind)[meta["name"]]
        if meta.get("uid"):
            children.deleted.add(meta["uid"])  # a late list answer must not bring it back

    def forget_run(self, key: Key) -> None:
        self._runs.pop(key, None)

    def children(self, key: Key) -> tuple[list[JSON], list[JSON], list[JSON]]:
        found = self._runs.get(key) or RunChildren()
        return list(found.jobs.values()), list(found.pods.values()), list(found.approvals.values())

    def covers(self, key: Key, status: WorkflowRunStatus) -> bool:
        """Whether the cache holds everything the run's status says exists (else: list live)."""
        found = self._runs.get(key) or RunChildren()
        for step in status.steps:
            if step.phase != "Running":
                continue
            if step.approval_name and step.approval_name not in found.approvals:
                return False
            if not step.job_name:
                continue
            job = found.jobs.get(step.job_name)
            if job is None:
                return False
            state, _ = job_state(job.get("status") or {})
            if state != "active" and not _has_finished_pod(found, job):
                return False
        return True

    def __len__(self) -> int:
        return sum(len(c.jobs) + len(c.pods) + len(c.approvals) for c in self._runs.values())


def _has_finished_pod(found: RunChildren, job: JSON) -> bool:
    # By controller, as build_observed matches them: a look-alike pod with the Job's labels must not
    # make the cache look complete while the real pod's result is missing.
    for pod in found.pods.values():
        if controller_uid(pod) != job["metadata"].get("uid"):
            continue
        with contextlib.suppress(AttributeError, TypeError):
            if any((c.get("state") or {}).get("terminated") for c in pod["status"]["containerStatuses"]):
                return True
    return False
