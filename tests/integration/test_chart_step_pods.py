"""The chart's stepPods values: what it renders into the operator's environment is what the operator reads, and
what would give a step pod a towline.dev/ label or annotation, or a PriorityClass of its own, is refused.

Rendered with the pinned helm (`helm template`); nothing here needs a cluster. That a step pod carries these on a
real node, and runs under a ResourceQuota on CPU limits, is tests/integration/test_step_pods_on_the_node.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.helmsupport import find, render, template

from towline.k8s.objects import StepPodSettings
from towline.runtime.config import OperatorConfig
from towline_dev.binaries import BinarySet

pytestmark = pytest.mark.integration

IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def operator_reads(documents: list[dict[str, Any]]) -> StepPodSettings:
    """The step pod settings the operator takes from the environment the chart gives its container."""
    pod = find(documents, "Deployment", "towline-operator")["spec"]["template"]["spec"]
    env = {v["name"]: v["value"] for v in pod["containers"][0]["env"] if "value" in v}
    return OperatorConfig.from_environment({**env, **IN_CLUSTER}).pod_settings


def test_by_default_step_pods_have_cpu_and_memory_limits_and_keep_a_mesh_out(k8s_binaries: BinarySet) -> None:
    settings = operator_reads(render(k8s_binaries))
    assert settings.resources == {"requests": {"cpu": "50m", "memory": "64Mi"},
                                  "limits": {"cpu": "1", "memory": "256Mi"}}
    assert dict(settings.annotations) == {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}
    assert (dict(settings.labels), dict(settings.affinity), settings.priority_class_name) == ({}, {}, "")


def test_step_pod_values_reach_the_operator_which_reads_them(k8s_binaries: BinarySet) -> None:
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["steps"]}]}}]}}
    settings = operator_reads(render(k8s_binaries, {
        "stepPods.resources": json.dumps({"requests": {"cpu": "100m", "memory": "128Mi"},
                                          "limits": {"cpu": 2, "memory": "1Gi"}}),
        "stepPods.labels": json.dumps({"cost-center": "ops-42", "example.com/team": "payments"}),
        "stepPods.annotations": json.dumps({"example.com/owner": "platform"}),
        "stepPods.affinity": json.dumps(affinity),
        "stepPods.priorityClassName": "towline-steps",
    }))
    assert settings.resources == {"requests": {"cpu": "100m", "memory": "128Mi"},
                                  "limits": {"cpu": "2", "memory": "1Gi"}}
    assert dict(settings.labels) == {"cost-center": "ops-42", "example.com/team": "payments"}
    # Helm merges maps: the mesh opt-out stays beside them unless set to null (values.yaml says so).
    assert dict(settings.annotations) == {"example.com/owner": "platform", "sidecar.istio.io/inject": "false",
                                          "linkerd.io/inject": "disabled"}
    assert (dict(settings.affinity), settings.priority_class_name) == (affinity, "towline-steps")


def test_a_mesh_annotation_set_to_null_is_left_off(k8s_binaries: BinarySet) -> None:
    settings = operator_reads(render(k8s_binaries, {"stepPods.annotations": '{"linkerd.io/inject": null}'}))
    assert dict(settings.annotations) == {"sidecar.istio.io/inject": "false"}


@pytest.mark.parametrize(("values", "named"), [
    ({"stepPods.labels": '{"towline.dev/step-pod": "false"}'}, "/stepPods/labels/towline.dev~1step-pod"),
    ({"stepPods.labels": '{"towline.dev/run": "another-run"}'}, "/stepPods/labels/towline.dev~1run"),
    ({"stepPods.labels": '{"egress.towline.dev/group": "x"}'}, "egress.towline.dev/group"),
    ({"stepPods.annotations": '{"towline.dev/step-id": "other"}'}, "/stepPods/annotations/towline.dev~1step-id"),
    ({"stepPods.labels": '{"team": "two words"}'}, "two words"),
    ({"stepPods.resources": '{"limits": {"cpu": "lots"}}'}, "lots"),
    ({"stepPods.resources": '{"limits": {"gpu": "1"}}'}, "gpu"),
    ({"stepPods.priorityClassName": "High Priority"}, "priorityClassName"),
])
def test_values_that_would_take_towlines_own_keys_or_break_the_pods_are_refused(
    k8s_binaries: BinarySet, values: dict[str, str], named: str,
) -> None:
    result = template(k8s_binaries, values)
    assert result.returncode != 0, f"{values} rendered"
    assert "schema" in result.stderr and named in result.stderr, result.stderr


def test_the_schema_left_aside_the_operator_still_refuses_towlines_own_labels(k8s_binaries: BinarySet) -> None:
    # operator.extraEnv comes after the chart's own variables and is not checked key by key: the operator's
    # reader of its environment is the last word, and it stops at start naming the chart value.
    documents = render(k8s_binaries, {"operator.extraEnv": json.dumps(
        [{"name": "TOWLINE_STEP_LABELS", "value": '{"towline.dev/step-pod": "false"}'}])})
    with pytest.raises(ValueError, match=r"'towline.dev/step-pod' is Towline's own .*stepPods\.labels"):
        operator_reads(documents)


def test_the_step_objects_policy_admits_the_chart_priority_class_and_no_other(k8s_binaries: BinarySet) -> None:
    def host_rule(values: dict[str, str]) -> str:
        policy = find(render(k8s_binaries, values), "ValidatingAdmissionPolicy", "towline-step-objects")
        rules = policy["spec"]["validations"]
        return next(str(v["expression"]) for v in rules if "priorityClassName" in v["expression"])

    assert 'variables.pod.priorityClassName == ""' in host_rule({})
    assert 'variables.pod.priorityClassName == "towline-steps"' in host_rule(
        {"stepPods.priorityClassName": "towline-steps"})
