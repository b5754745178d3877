"""A gate's notification Job: a step Job in every respect the admission policies check, never a step attempt."""

from __future__ import annotations

from typing import Any

from towline.engine.naming import notification_job_name
from towline.k8s.labels import LABEL_NOTIFICATION
from towline.k8s.objects import (
    RunRef,
    StepPodSettings,
    build_step_egress_policy,
    egress_rules,
    notification_selector,
)
from towline.k8s.observe import build_observed
from towline.k8s.stepjobs import Notification, build_step_job
from towline.validation.catalog import connector_catalog

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")
NAME = notification_job_name("r-1", "review", "opened", 0)


def notification_job() -> dict[str, Any]:
    return build_step_job(
        RUN, Notification(connector_catalog(), "opened", 0), job_name=NAME, step_id="review", attempt=0,
        action="webhook.send", timeout_seconds=None,
        inputs={"url": "https://hooks.example.com/a", "payload": {"text": "hi"}},
        credentials={"webhook": "approvals-hook"}, idempotency_key="tl-k", allow_hosts=("hooks.example.com",),
        settings=StepPodSettings(),
    )


def test_it_has_the_step_job_shape_the_operator_jobs_policy_admits() -> None:
    job = notification_job()
    meta, pod = job["metadata"], job["spec"]["template"]
    assert meta["name"].startswith("towline-step-") and job["spec"]["backoffLimit"] == 0
    assert {"towline.dev/workflow", "towline.dev/run", "towline.dev/step", "towline.dev/attempt"} <= set(meta["labels"])
    assert pod["metadata"]["labels"]["towline.dev/run"] == "r-1"
    assert pod["metadata"]["labels"]["towline.dev/step-pod"] == "true"
    assert meta["ownerReferences"][0]["kind"] == "WorkflowRun" and meta["ownerReferences"][0]["controller"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python3", "-m", "towline_connectors.runner"]
    assert all(item["name"].startswith("TOWLINE_") and "valueFrom" not in item for item in container["env"])
    secrets = [v["secret"] for v in pod["spec"]["volumes"] if "secret" in v]
    assert [(s["secretName"], s["optional"]) for s in secrets] == [("approvals-hook", True)]


def test_its_label_selects_only_its_own_pod_for_its_egress_policy() -> None:
    job = notification_job()
    selector = notification_selector(RUN, "review", "opened", 0)
    assert selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert job["metadata"]["labels"][LABEL_NOTIFICATION] == "opened-0"
    hosts = ("hooks.example.com",)
    policy = build_step_egress_policy(RUN, name=NAME, step_id="review", allow_hosts=hosts,
                                      rules=egress_rules(egress=[], connector_ports=[443], allow_hosts=hosts))
    assert policy["metadata"]["annotations"] == {"towline.dev/allow-hosts": "hooks.example.com"}


def test_observing_the_run_does_not_count_it_as_an_attempt_of_the_gate() -> None:
    job = {**notification_job(), "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    job["metadata"] = {**job["metadata"], "uid": "job-uid"}
    assert build_observed([job], [], [], run_name="r-1", run_uid="uid-1").jobs == {}

