"""A step pod's result counts only when the pod ran the image its Job asked for, once: a pod's image is
mutable, and the kubelet restarts a container whose image changed, so a swapped image could write the result."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from towline.engine import job_name
from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.observe import build_observed
from towline.k8s.stepimage import same_image
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.runtime.cache import trim
from towline.validation.catalog import connector_catalog

RUN = RunRef(name="deploy-1", namespace="team", uid="uid-of-deploy-1", workflow="wf")
JOB = job_name(RUN.name, "deploy", 1)
ASKED = "ghcr.io/towline/runner:0.1.0"
FORGED = {"ok": True, "output": {"forged": "by-carol"}}


def finished_job() -> dict[str, Any]:
    job = build_step_job(
        RUN, BuiltinAction(connector_catalog()),
        job_name=JOB, step_id="deploy", attempt=1, action="data.transform", inputs={}, credentials={},
        idempotency_key="k", timeout_seconds=60, settings=StepPodSettings(image=ASKED),
    )
    job["metadata"]["uid"] = "job-uid"
    job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    return job


def pod_that_ran(job: dict[str, Any], image: str, *, spec_image: str | None = None, restarts: int = 0,
                 image_id: str = "localhost/x@sha256:" + "0" * 64) -> dict[str, Any]:
    spec = copy.deepcopy(job["spec"]["template"]["spec"])
    spec["containers"][0]["image"] = spec_image or image
    status: dict[str, Any] = {"name": "step", "image": image, "imageID": image_id, "restartCount": restarts,
                              "state": {"terminated": {"exitCode": 0, "message": json.dumps(FORGED)}}}
    if restarts:
        status["lastState"] = {"terminated": {"exitCode": 137, "reason": "Error"}}
    return {
        "metadata": {"name": f"{JOB}-abcde", "labels": job["spec"]["template"]["metadata"]["labels"],
                     "ownerReferences": [{"kind": "Job", "name": JOB, "uid": "job-uid", "controller": True}]},
        "spec": spec,
        "status": {"containerStatuses": [status]},
    }


def observe(job: dict[str, Any], pod: dict[str, Any], *, trimmed: bool) -> Any:
    jobs, pods = ([trim("Job", job)], [trim("Pod", pod)]) if trimmed else ([job], [pod])
    observed = build_observed(jobs, pods, [], run_name=RUN.name, run_uid=RUN.uid).jobs[("deploy", 1)]
    assert observed.result is not None
    return observed.result


@pytest.mark.parametrize("trimmed", [True, False], ids=["through-the-cache", "listed"])
def test_a_pod_that_ran_the_asked_image_supplies_the_result(trimmed: bool) -> None:
    job = finished_job()
    result = observe(job, pod_that_ran(job, ASKED), trimmed=trimmed)
    assert result.ok and result.output == FORGED["output"]


@pytest.mark.parametrize("trimmed", [True, False], ids=["through-the-cache", "listed"])
@pytest.mark.parametrize(("ran", "spec_image", "restarts", "said"), [
    ("localhost/forger:dev", None, 1, f"was changed to image localhost/forger:dev; its Job asked for {ASKED}"),
    # swapped before the container started, then back:
    ("localhost/forger:dev", ASKED, 0, f"ran image localhost/forger:dev, not {ASKED}"),
    (ASKED, "localhost/forger:dev", 0, "was changed to image localhost/forger:dev"),
    (ASKED, None, 1, "was restarted"),  # swapped there and back: the restart gives it away
], ids=["swapped-while-running", "swapped-and-back", "spec-changed", "restarted"])
def test_a_pod_whose_image_was_changed_never_supplies_the_result(
    trimmed: bool, ran: str, spec_image: str | None, restarts: int, said: str,
) -> None:
    job = finished_job()
    result = observe(job, pod_that_ran(job, ran, spec_image=spec_image, restarts=restarts), trimmed=trimmed)
    assert not result.ok and result.output is None
    assert (result.error_class, result.retryable) == ("permanent", False)
    assert said in (result.message or "")
    assert "forged" not in repr(result)


def test_a_job_naming_no_image_accepts_no_result() -> None:
    job = finished_job()
    pod = pod_that_ran(job, ASKED)
    del job["spec"]
    result = observe(job, pod, trimmed=False)
    assert not result.ok and "names no container image" in (result.message or "")


@pytest.mark.parametrize(("asked", "reported", "image_id", "same"), [
    ("busybox", "docker.io/library/busybox:latest", None, True),
    ("team/runner:1", "docker.io/team/runner:1", None, True),
    ("localhost/towline-runner:dev", "localhost/towline-runner:dev", None, True),
    ("registry.example:5000/runner", "registry.example:5000/runner:latest", None, True),
    ("ghcr.io/towline/runner@sha256:" + "a" * 64, "ghcr.io/towline/runner:0.1.0",
     "ghcr.io/towline/runner@sha256:" + "a" * 64, True),
    ("ghcr.io/towline/runner@sha256:" + "a" * 64, "ghcr.io/towline/runner:0.1.0",
     "ghcr.io/towline/runner@sha256:" + "b" * 64, False),
    ("ghcr.io/towline/runner:0.1.0", "ghcr.io/towline/runner:0.1.1", None, False),
    ("runner:1", "localhost/runner:1", None, False),
])
def test_reported_images_are_compared_in_their_normal_form(
    asked: str, reported: str, image_id: str | None, same: bool,
) -> None:
    assert same_image(asked, reported, image_id) is same
