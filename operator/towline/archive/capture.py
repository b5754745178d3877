"""What the archive takes from the cluster's objects: a run, an approval, a step pod's log, as records.

Pure (no I/O, no clock): the archive process (`towline.archive.service`) hands in the objects as the API server
answered them and appends what comes out. A record keeps what an auditor asks about later (who asked, with what
params, what each step did with which image, who decided each gate and why, what was sent) and nothing the API
server adds for its own bookkeeping (managedFields, resourceVersion), so the same run read twice is the same
record. No Secret value is ever in a run, an approval or (redacted by the runner) a step's log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from towline.api.runterms import ENDED_APPROVAL_PHASES, TERMINAL_RUN_PHASES
from towline.archive.records import ApprovalIndex, LogIndex, RunIndex
from towline.jsontypes import JSON
from towline.k8s.labels import ANNOTATION_STEP_ID, LABEL_ATTEMPT, LABEL_NOTIFICATION, LABEL_RUN, LABEL_STEP
from towline_connectors.wire import parse_rfc3339

KEPT_METADATA = ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp", "generation",
                 "deletionTimestamp", "ownerReferences")
DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
"""A copy of the spec the record holds anyway."""


@dataclass(frozen=True)
class Capture:
    """One record to append: its kind, key (an object's UID), body and indexed fields."""

    kind: str
    key: str
    body: JSON
    index: RunIndex | ApprovalIndex | LogIndex


def run_finished(run: Mapping[str, Any]) -> bool:
    return (run.get("status") or {}).get("phase") in TERMINAL_RUN_PHASES


def run_deleting(run: Mapping[str, Any]) -> bool:
    return bool((run.get("metadata") or {}).get("deletionTimestamp"))


def approval_decided(approval: Mapping[str, Any]) -> bool:
    return (approval.get("status") or {}).get("phase") in ENDED_APPROVAL_PHASES


def kept_object(body: Mapping[str, Any]) -> JSON:
    """The object as an auditor reads it: its identity, spec and status, without the API server's bookkeeping."""
    meta = body.get("metadata") or {}
    kept: JSON = {key: meta[key] for key in KEPT_METADATA if key in meta}
    if "annotations" in kept:
        kept["annotations"] = {k: v for k, v in kept["annotations"].items() if k not in DROPPED_ANNOTATIONS}
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": kept,
            "spec": body.get("spec") or {}, "status": body.get("status") or {}}


def _instant(text: object) -> datetime | None:
    """An RFC 3339 time the API server or the operator wrote, as an instant; None when absent or malformed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = parse_rfc3339(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def run_finished_at(run: Mapping[str, Any]) -> datetime | None:
    """When the run ended, as its status says; None before (or when the time cannot be read)."""
    return _instant((run.get("status") or {}).get("finishedAt"))


def run_capture(run: Mapping[str, Any], approvals: Iterable[Mapping[str, Any]], logs: Iterable[JSON],
                now: datetime) -> Capture:
    """The record of a run that ended (or is being deleted): the run, its approvals as decided, and the digests of
    its steps' log records (`logs`: {"key", "digest", "step", "attempt", "container", "truncated"}), so the run's
    record vouches for its logs too."""
    meta, spec, status = run.get("metadata") or {}, run.get("spec") or {}, run.get("status") or {}
    kept_approvals = sorted((kept_object(a) for a in approvals), key=lambda a: a["metadata"].get("name") or "")
    approvers = tuple(sorted({a["spec"]["decidedBy"] for a in kept_approvals if a["spec"].get("decidedBy")}))
    created = _instant(meta.get("creationTimestamp")) or now
    body: JSON = {
        "run": kept_object(run),
        "approvals": kept_approvals,
        "logs": sorted(logs, key=lambda log: (str(log.get("step")), int(log.get("attempt") or 0),
                                              str(log.get("container")), str(log.get("key")))),
        "deletedBeforeItEnded": run_deleting(run) and not run_finished(run),
    }
    index = RunIndex(
        name=str(meta.get("name") or ""),
        workflow=str((spec.get("workflowRef") or {}).get("name") or ""),
        phase=str(status.get("phase") or "Pending"),
        requester=str(spec.get("requestedBy") or ""),
        started_at=_instant(status.get("startedAt")) or created,
        finished_at=(run_finished_at(run) or now) if status.get("finishedAt") else None,
        labels=dict(meta.get("labels") or {}),
        approvers=approvers,
    )
    return Capture(kind="run", key=str(meta.get("uid") or ""), body=body, index=index)


def approval_capture(approval: Mapping[str, Any]) -> Capture:
    """The record of a decided (or expired, or cancelled) approval: the gate, the decision, who, when and why."""
    meta, spec = approval.get("metadata") or {}, approval.get("spec") or {}
    owner: JSON = next((ref for ref in meta.get("ownerReferences") or () if ref.get("kind") == "WorkflowRun"), {})
    index = ApprovalIndex(
        run_uid=str(owner.get("uid") or ""),
        run_name=str(spec.get("runName") or owner.get("name") or ""),
        step=str(spec.get("step") or ""),
        decided_by=spec.get("decidedBy"),
        decision=spec.get("decision") or (approval.get("status") or {}).get("phase"),
    )
    return Capture(kind="approval", key=str(meta.get("uid") or ""), body={"approval": kept_object(approval)},
                   index=index)


def pod_containers(pod: Mapping[str, Any]) -> list[str]:
    """The pod's containers in the order they ran: init containers first."""
    spec = pod.get("spec") or {}
    return [c["name"] for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())) if "name" in c]


def pod_step(pod: Mapping[str, Any]) -> tuple[str, int]:
    """(step id, attempt) of a step pod; a notification pod's step is `<step>/notification-<event>-<index>`."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    step = str(annotations.get(ANNOTATION_STEP_ID) or labels.get(LABEL_STEP) or "")
    if labels.get(LABEL_NOTIFICATION):
        step = f"{step}/notification-{labels[LABEL_NOTIFICATION]}"
    attempt = str(labels.get(LABEL_ATTEMPT) or "0")
    return step, int(attempt) if attempt.isdigit() else 0


def log_key(pod: Mapping[str, Any], container: str) -> str:
    return f"{(pod.get('metadata') or {}).get('uid', '')}/{container}"


def log_capture(pod: Mapping[str, Any], run_uid: str, container: str, text: str, *, cap: int) -> Capture:
    """A container's log, cut at `cap` bytes (UTF-8): `bytes` is what was read, `truncated` whether it was cut."""
    meta = pod.get("metadata") or {}
    raw = text.encode("utf-8", errors="replace")
    kept = raw[:cap].decode("utf-8", errors="ignore")
    step, attempt = pod_step(pod)
    run_name = str((meta.get("labels") or {}).get(LABEL_RUN) or "")
    body: JSON = {"pod": str(meta.get("name") or ""), "container": container, "step": step, "attempt": attempt,
                  "run": run_name, "text": kept, "bytes": len(raw), "truncated": len(raw) > cap}
    index = LogIndex(run_uid=run_uid, run_name=run_name, step=step, attempt=attempt,
                     pod_uid=str(meta.get("uid") or ""), container=container)
    return Capture(kind="log", key=log_key(pod, container), body=body, index=index)

