"""What a step pod's environment holds: the runner's settings only, nothing the namespace's Services add."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.validation.catalog import connector_catalog

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")


def step_pod_spec(**settings: Any) -> dict[str, Any]:
    job = build_step_job(
        RUN, BuiltinAction(connector_catalog()),
        job_name="r-1-call-1", step_id="call", attempt=1, action="http.request",
        inputs={"url": "https://example.com"}, credentials={"api": "api-token"}, idempotency_key="k",
        timeout_seconds=60, settings=StepPodSettings(**settings),
    )
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def test_step_pods_get_no_service_links() -> None:
    # Without this the kubelet adds <SERVICE>_SERVICE_HOST, <SERVICE>_PORT=tcp://... for every Service of
    # the namespace: an inventory of its addresses in every step, and names anyone who may create a
    # Service chooses (a Service "towline-input" yields TOWLINE_INPUT_PORT next to the runner's settings).
    assert step_pod_spec()["enableServiceLinks"] is False


def test_step_pods_get_no_service_account_token() -> None:
    assert step_pod_spec()["automountServiceAccountToken"] is False


def test_the_step_container_env_is_only_the_runners_settings() -> None:
    (container,) = step_pod_spec(extra_env={"TOWLINE_LOG_LEVEL": "debug"})["containers"]
    names = [item["name"] for item in container["env"]]
    assert all(name.startswith("TOWLINE_") for name in names), names
    assert "TOWLINE_LOG_LEVEL" in names
    assert not any("valueFrom" in item for item in container["env"]), "no env var reads a Secret or a field"


def test_the_runner_gets_an_absolute_deadline_from_the_jobs_creation() -> None:
    job = build_step_job(
        RUN, BuiltinAction(connector_catalog()),
        job_name="r-1-call-1", step_id="call", attempt=1, action="http.request",
        inputs={"url": "https://example.com"}, credentials={}, idempotency_key="k", timeout_seconds=60,
        settings=StepPodSettings(), created_at=datetime(2026, 12, 2, 10, 0, tzinfo=UTC),
    )
    env = {item["name"]: item["value"] for item in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["TOWLINE_DEADLINE_SECONDS"], env["TOWLINE_DEADLINE_AT"]) == ("55", "2026-12-02T10:00:55Z")
