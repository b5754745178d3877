"""A pod's controlling Job, read one way for the operator's cache, the archive's TTL patch and the plugin's logs."""

from __future__ import annotations

from typing import Any

import pytest

from towline.k8s.owners import JobRef, controller_uid, controlling_job

JOB_OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "towline-step-r-a-1", "uid": "u-job", "controller": True}


def pod(*owners: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "team", "ownerReferences": list(owners)}}


def test_a_pod_its_job_controls_names_that_job() -> None:
    assert controlling_job(pod(JOB_OWNER)) == JobRef("team", "towline-step-r-a-1", "u-job")
    assert controller_uid(pod(JOB_OWNER)) == "u-job"


@pytest.mark.parametrize(("owner", "why"), [
    ({**JOB_OWNER, "controller": False}, "an owner that does not control the pod"),
    ({**JOB_OWNER, "kind": "ReplicaSet", "apiVersion": "apps/v1"}, "a controller that is no Job"),
    ({**JOB_OWNER, "apiVersion": "example.com/v1"}, "a kind named Job of another API group"),
])
def test_a_pod_no_job_controls_has_no_controlling_job(owner: dict[str, Any], why: str) -> None:
    assert controlling_job(pod(owner)) is None, why


def test_a_pod_without_owners_has_no_controller() -> None:
    assert controlling_job(pod()) is None
    assert controller_uid(pod()) is None
    assert controlling_job({}) is None, "no metadata at all"
