"""Forged step objects and the refusals the admission policy towline-step-objects gives them.

Shared by the attacks on a run's Jobs and pods and on its notification Jobs.
"""

from __future__ import annotations

from typing import Any

from towline_dev.images import RUNNER_IMAGE

OPERATOR_ONLY = ("Jobs labelled towline.dev/run (on the Job or its pod template) or named towline-step-* are created "
                 "by the Towline operator only; carol may not create one")
POD_CREATORS_ONLY = "pods labelled towline.dev/run or named towline-step-* are created by the Towline operator (or, " \
    "for step Jobs of an earlier release, the Job controller) only; carol may not create one"
OWNERSHIP = "only the Towline operator and the Job controller may add or remove the label towline.dev/run"
SPEC = "the spec of a step Job (its image, above all) is what the run trusts for the step's result"


POD_SPEC: dict[str, Any] = {
    "restartPolicy": "Never",
    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "c", "image": RUNNER_IMAGE, "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
}
"""A pod spec Pod Security's restricted level admits, so only Towline's policy can refuse it."""


def pod_manifest(ns: str, name: str, labels: dict[str, str], owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "ownerReferences": owners},
        "spec": POD_SPEC,
    }


def job_manifest(ns: str, name: str, labels: dict[str, str], owners: list[dict[str, Any]],
                 pod_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A suspended Job: admitted or not, it never starts a pod."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "ownerReferences": owners},
        "spec": {"suspend": True, "template": {"metadata": {"labels": pod_labels or {}}, "spec": POD_SPEC}},
    }


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True}
