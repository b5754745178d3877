"""Pull secrets, node selector and tolerations of step pods: the operator writes them onto every step Job's pod."""

from __future__ import annotations

from typing import Any

from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import BuiltinAction, StepTypeImage, build_step_job
from towline.validation.catalog import connector_catalog

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")
TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "steps", "effect": "NoSchedule"}
PLACED = StepPodSettings(image_pull_secrets=("regcred",), node_selector={"pool": "steps"}, tolerations=(TOLERATION,))


def step_pod(settings: StepPodSettings) -> dict[str, Any]:
    job = build_step_job(
        RUN, BuiltinAction(connector_catalog()),
        job_name="towline-step-r-1-call-1", step_id="call", attempt=1, action="http.request",
        inputs={"url": "https://example.com"}, credentials={}, idempotency_key="k", timeout_seconds=60,
        settings=settings,
    )
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def user_step_pod(settings: StepPodSettings, type_pull_secrets: list[str]) -> dict[str, Any]:
    step_type = ResolvedStepType(kind="StepType", name="deploy", spec=StepTypeSpec.model_validate({
        "image": "registry.example.com/team/deploy:1.4.0", "imagePullSecrets": type_pull_secrets,
    }))
    job = build_step_job(
        RUN, StepTypeImage(step_type),
        job_name="towline-step-r-1-roll-1", step_id="roll", attempt=1, action="steptype/deploy",
        inputs={}, credentials={}, idempotency_key="k", timeout_seconds=None,
        settings=settings,
    )
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def test_a_built_in_step_pod_gets_the_pull_secrets_node_selector_and_tolerations() -> None:
    pod = step_pod(PLACED)
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"pool": "steps"}
    assert pod["tolerations"] == [TOLERATION]


def test_without_settings_the_pod_names_none_of_them() -> None:
    # No imagePullSecrets at all: Kubernetes then adds those of the namespace's default ServiceAccount.
    pod = step_pod(StepPodSettings())
    assert not {"imagePullSecrets", "nodeSelector", "tolerations"} & set(pod)


def test_the_pod_gets_copies_not_the_settings_themselves() -> None:
    pod = step_pod(PLACED)
    pod["nodeSelector"]["pool"] = "other"
    pod["tolerations"][0]["value"] = "other"
    assert PLACED.node_selector == {"pool": "steps"} and PLACED.tolerations == (TOLERATION,)


def test_a_user_step_types_own_pull_secrets_come_first_then_the_operators_each_once() -> None:
    pod = user_step_pod(PLACED, ["team-registry", "regcred"])
    assert pod["imagePullSecrets"] == [{"name": "team-registry"}, {"name": "regcred"}]
    assert (pod["nodeSelector"], pod["tolerations"]) == ({"pool": "steps"}, [TOLERATION])
    assert user_step_pod(StepPodSettings(), ["team-registry"])["imagePullSecrets"] == [{"name": "team-registry"}]
    assert user_step_pod(PLACED, [])["imagePullSecrets"] == [{"name": "regcred"}]
