"""TRACEPARENT in a step attempt's containers: the attempt's own span, only while traces are exported."""

from __future__ import annotations

from typing import Any

from towline.api.steptype import ResolvedStepType
from towline.engine.traces import attempt_span_id, traced_run
from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import BuiltinAction, Notification, StepKind, StepTypeImage, build_step_job
from towline.validation.catalog import connector_catalog
from towline_step.protocol import parse_traceparent

INGRESS = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE = traced_run({"uid": "uid-1", "name": "r-1", "namespace": "team",
                    "annotations": {"towline.dev/traceparent": INGRESS}}, workflow="wf", trigger="webhook")
TRACED = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf", trace=TRACE)
UNTRACED = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")
STEP_TYPE = ResolvedStepType.model_validate({
    "kind": "StepType", "name": "greeter", "spec": {"image": "registry.example.com/greeter@sha256:" + "a" * 64}})


def environments(run: RunRef, kind: StepKind, extra_env: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    job = build_step_job(
        run, kind, job_name="r-1-call-2", step_id="call", attempt=2, action="http.request",
        inputs={"url": "https://example.com"}, credentials={}, idempotency_key="k", timeout_seconds=60,
        settings=StepPodSettings(extra_env=extra_env or {}),
    )
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return {c["name"]: {e["name"]: e["value"] for e in c["env"]}
            for c in [*pod.get("initContainers", []), *pod["containers"]]}


def test_the_runner_is_told_the_attempts_span_in_the_runs_trace() -> None:
    (env,) = environments(TRACED, BuiltinAction(connector_catalog())).values()
    told = parse_traceparent(env["TRACEPARENT"])
    assert told is not None
    assert told.trace_id == int("4bf92f3577b34da6a3ce929d0e0e4736", 16)
    assert told.span_id == attempt_span_id("uid-1", "call", 2)


def test_a_step_types_own_container_gets_the_same_traceparent() -> None:
    envs = environments(TRACED, StepTypeImage(STEP_TYPE))
    assert envs["step"]["TRACEPARENT"] == envs["prepare"]["TRACEPARENT"]
    assert parse_traceparent(envs["step"]["TRACEPARENT"]) is not None


def test_no_traceparent_while_traces_are_off_nor_in_a_notification() -> None:
    assert all("TRACEPARENT" not in env for env in environments(UNTRACED, BuiltinAction(connector_catalog())).values())
    notification = environments(TRACED, Notification(connector_catalog(), "opened", 0))
    assert all("TRACEPARENT" not in env for env in notification.values())


def test_the_charts_extra_environment_cannot_move_the_attempts_span() -> None:
    other = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    (env,) = environments(TRACED, BuiltinAction(connector_catalog()), {"TRACEPARENT": other}).values()
    assert env["TRACEPARENT"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
