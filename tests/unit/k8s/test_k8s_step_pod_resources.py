"""Step pods' resources, labels and annotations: the chart's defaults, a step's own resources over them, and
Towline's own labels, which nothing a chart value says can replace."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from towline.api.resources import PodMetadata, StepResources, quantity_value
from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.api.workflow import Step
from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import BuiltinAction, Notification, StepKind, StepTypeImage, build_step_job
from towline.validation.catalog import connector_catalog

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")
STEP_TYPE = ResolvedStepType(kind="StepType", name="deploy", spec=StepTypeSpec.model_validate({
    "image": "registry.example.com/team/deploy:1.4.0", "resources": {"limits": {"memory": "512Mi"}},
}))


def job(kind: StepKind | None = None, *, settings: StepPodSettings | None = None,
        resources: dict[str, Any] | None = None, action: str = "data.transform") -> dict[str, Any]:
    manifest: dict[str, Any] = build_step_job(
        RUN, kind or BuiltinAction(connector_catalog()), job_name="towline-step-r-1-s-1", step_id="s", attempt=1,
        action=action, inputs={"fields": {"a": "1"}}, credentials={}, idempotency_key="k", timeout_seconds=60,
        settings=settings or StepPodSettings(),
        resources=None if resources is None else StepResources.model_validate(resources))
    return manifest


def containers(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = manifest["spec"]["template"]["spec"]
    return {c["name"]: c for c in (*spec.get("initContainers", ()), *spec["containers"])}


@pytest.mark.parametrize("kind", [None, Notification(connector_catalog(), "opened", 0), StepTypeImage(STEP_TYPE)],
                         ids=["action", "notification", "step-type"])
def test_every_step_container_has_cpu_and_memory_limits_by_default(kind: StepKind | None) -> None:
    # A ResourceQuota on limits.cpu and limits.memory refuses a pod any of whose containers lacks one.
    for name, container in containers(job(kind, action="notify.slack" if kind else "data.transform")).items():
        assert set(container["resources"]["limits"]) == {"cpu", "memory"}, name
        assert set(container["resources"]["requests"]) == {"cpu", "memory"}, name


def test_the_chart_defaults_size_every_container() -> None:
    chart = {"requests": {"cpu": "100m", "memory": "96Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    found = containers(job(StepTypeImage(STEP_TYPE), settings=StepPodSettings(resources=chart)))
    assert found["prepare"]["resources"] == chart
    # The type's own memory limit over the chart's, the rest the chart's.
    assert found["step"]["resources"] == {"requests": chart["requests"], "limits": {"cpu": "2", "memory": "512Mi"}}


def test_a_steps_own_resources_win_over_the_step_types_and_size_only_its_container() -> None:
    found = containers(job(StepTypeImage(STEP_TYPE), resources={"limits": {"memory": "2Gi", "cpu": "3"}}))
    assert found["step"]["resources"]["limits"] == {"memory": "2Gi", "cpu": "3"}
    assert found["prepare"]["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}


def test_a_request_above_the_default_limit_raises_that_limit_with_it() -> None:
    (container,) = containers(job(resources={"requests": {"memory": "1Gi", "cpu": "2"}})).values()
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "1Gi"},
                                      "limits": {"cpu": "2", "memory": "1Gi"}}


def test_a_limit_below_the_default_request_lowers_that_request_with_it() -> None:
    (container,) = containers(job(resources={"limits": {"cpu": "20m", "memory": "32Mi"}})).values()
    assert container["resources"] == {"requests": {"cpu": "20m", "memory": "32Mi"},
                                      "limits": {"cpu": "20m", "memory": "32Mi"}}


def test_a_code_steps_declared_limits_win_over_the_steps_resources() -> None:
    manifest = job(resources={"limits": {"cpu": "3"}, "requests": {"cpu": "200m"}}, action="code.python")
    (container,) = containers(manifest).values()
    assert container["resources"]["limits"]["cpu"] == "1"  # code.python's own default cpu limit
    assert container["resources"]["requests"]["cpu"] == "200m"


@pytest.mark.parametrize(("resources", "field"), [
    ({"requests": {"cpu": "500m"}, "limits": {"cpu": "200m"}}, "limits.cpu (200m) is below requests.cpu (500m)"),
    ({"requests": {"memory": "1Gi"}, "limits": {"memory": "1000Mi"}},
     "limits.memory (1000Mi) is below requests.memory"),
])
def test_a_step_whose_limit_is_below_its_request_is_refused_naming_the_field(
    resources: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError, match=r"resources\n.*" + field.replace("(", r"\(").replace(")", r"\)")):
        Step.model_validate({"id": "s", "action": "data.transform", "resources": resources})


def test_a_step_whose_resources_are_not_quantities_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"resources\.requests\.cpu"):
        Step.model_validate({"id": "s", "action": "data.transform", "resources": {"requests": {"cpu": "lots"}}})


@pytest.mark.parametrize(("text", "value"), [("100m", "0.1"), ("0.5", "0.5"), ("128Mi", str(128 << 20)),
                                             ("1G", "1000000000"), ("2", "2")])
def test_quantities_read_as_kubernetes_reads_them(text: str, value: str) -> None:
    assert quantity_value(text) == quantity_value(value)


def test_chart_labels_and_annotations_reach_the_pod_beside_towlines_own() -> None:
    settings = StepPodSettings(labels={"cost-center": "ops-42"}, annotations={"example.com/team": "payments"})
    metadata = job(settings=settings)["spec"]["template"]["metadata"]
    assert metadata["labels"]["cost-center"] == "ops-42"
    assert metadata["labels"]["towline.dev/step-pod"] == "true"
    assert metadata["annotations"] == {"example.com/team": "payments"}


def test_step_pods_keep_a_service_mesh_out_by_default() -> None:
    annotations = job()["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}


def test_chart_labels_cannot_replace_or_add_towlines_own() -> None:
    # The settings reader refuses these at start; the builder holds even if handed them: the default-deny policy
    # selects towline.dev/step-pod=true, the step's egress policy its run and step, the admission policies the rest.
    hostile = {"towline.dev/step-pod": "false", "towline.dev/run": "another-run", "towline.dev/egress": "wide",
               "towline.dev/notification": "x", "policy.towline.dev/anything": "y"}
    settings = StepPodSettings(labels=hostile, annotations={"towline.dev/step-id": "other", "towline.dev/x": "y"})
    honest = job()["spec"]["template"]["metadata"]
    metadata = job(settings=settings)["spec"]["template"]["metadata"]
    assert metadata["labels"] == honest["labels"]
    assert "annotations" not in metadata


def test_affinity_and_priority_class_reach_the_pod() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["steps"]}]}]}}}
    spec = job(settings=StepPodSettings(affinity=affinity, priority_class_name="towline-steps"))["spec"]["template"]
    assert spec["spec"]["affinity"] == affinity and spec["spec"]["priorityClassName"] == "towline-steps"
    assert not {"affinity", "priorityClassName"} & set(job()["spec"]["template"]["spec"])


def pod_metadata_job(metadata: PodMetadata, settings: StepPodSettings | None = None) -> dict[str, Any]:
    manifest: dict[str, Any] = build_step_job(
        RUN, BuiltinAction(connector_catalog()), job_name="towline-step-r-1-s-1", step_id="s", attempt=1,
        action="data.transform", inputs={}, credentials={}, idempotency_key="k", timeout_seconds=60,
        settings=settings or StepPodSettings(), pod_metadata=metadata)
    return manifest


def test_a_steps_own_labels_and_annotations_go_over_the_charts() -> None:
    settings = StepPodSettings(labels={"cost-center": "platform", "tier": "a"})
    metadata = pod_metadata_job(PodMetadata.model_validate({
        "labels": {"cost-center": "payments"}, "annotations": {"sidecar.istio.io/inject": "true"}}),
        settings)["spec"]["template"]["metadata"]
    assert (metadata["labels"]["cost-center"], metadata["labels"]["tier"]) == ("payments", "a")
    assert metadata["annotations"] == {"sidecar.istio.io/inject": "true", "linkerd.io/inject": "disabled"}


@pytest.mark.parametrize("key", ["towline.dev/step-pod", "egress.towline.dev/group"])
def test_a_step_may_not_name_towlines_own_keys(key: str) -> None:
    with pytest.raises(ValidationError, match=r"podMetadata\n.*towline.dev/ keys are Towline's own"):
        Step.model_validate({"id": "s", "action": "data.transform", "podMetadata": {"labels": {key: "x"}}})
    with pytest.raises(ValidationError, match=r"towline.dev/ keys are Towline's own"):
        Step.model_validate({"id": "s", "action": "data.transform", "podMetadata": {"annotations": {key: "x"}}})


def test_towlines_own_labels_win_over_a_steps_that_got_past_validation() -> None:
    hostile = PodMetadata.model_construct(labels={"towline.dev/step-pod": "false", "towline.dev/run": "other"},
                                          annotations={"towline.dev/step-id": "other"})
    metadata = pod_metadata_job(hostile)["spec"]["template"]["metadata"]
    assert (metadata["labels"]["towline.dev/step-pod"], metadata["labels"]["towline.dev/run"]) == ("true", "r-1")
    assert "towline.dev/step-id" not in metadata["annotations"]
