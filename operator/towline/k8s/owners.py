"""Who controls an object: its ownerReference marked `controller`, and a step pod's Job read from it. Pure.

The one reading of an owner for the operator, the archive and the plugin: a step's result, its log and its Job's TTL
count only for the pod its Job controls, whatever labels say. No API calls, and nothing of the engine (the archive,
which may not import it, reads a pod's Job here too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobRef:
    """The Job that controls a pod (from the pod's controller reference)."""

    namespace: str
    name: str
    uid: str


def controller_ref(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The object's ownerReference with controller: true, if any."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if owner.get("controller"):
            return dict(owner)
    return None


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The UID of the object's controller, if any."""
    owner = controller_ref(obj)
    return None if owner is None else str(owner.get("uid"))


def controlling_job(pod: Mapping[str, Any]) -> JobRef | None:
    """The batch/v1 Job that controls `pod`; None when no Job does (a pod somebody else made, or its controller is
    something else)."""
    owner = controller_ref(pod)
    if owner is None or owner.get("kind") != "Job" or owner.get("apiVersion") != "batch/v1":
        return None
    if not owner.get("name") or not owner.get("uid"):
        return None
    return JobRef(str((pod.get("metadata") or {}).get("namespace") or ""), str(owner["name"]), str(owner["uid"]))
