"""Step pod settings from the operator's environment (the chart's stepPods values): read, or refused at start."""

from __future__ import annotations

import pytest

from towline.runtime.config import OperatorConfig

IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def settings(**env: str) -> OperatorConfig:
    return OperatorConfig.from_environment({**IN_CLUSTER, **env})


def test_without_the_variables_step_pods_get_no_pull_secrets_selector_or_tolerations() -> None:
    pod = settings().pod_settings
    assert (pod.image_pull_secrets, dict(pod.node_selector), pod.tolerations) == ((), {}, ())
    chart_defaults = settings(TOWLINE_STEP_IMAGE_PULL_SECRETS="", TOWLINE_STEP_NODE_SELECTOR="{}",
                              TOWLINE_STEP_TOLERATIONS="[]").pod_settings
    assert (chart_defaults.image_pull_secrets, dict(chart_defaults.node_selector), chart_defaults.tolerations) == (
        (), {}, ())


def test_pull_secrets_are_comma_separated_names_each_once() -> None:
    pod = settings(TOWLINE_STEP_IMAGE_PULL_SECRETS="regcred, mirror-creds,regcred").pod_settings
    assert pod.image_pull_secrets == ("regcred", "mirror-creds")


def test_node_selector_and_tolerations_are_read_as_json() -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "steps", "effect": "NoSchedule"}
    pod = settings(
        TOWLINE_STEP_NODE_SELECTOR='{"towline.dev/steps": "true", "kubernetes.io/os": "linux"}',
        TOWLINE_STEP_TOLERATIONS='[{"key": "dedicated", "operator": "Equal", "value": "steps", "effect": "NoSchedule"},'
                                 ' {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]',
    ).pod_settings
    assert dict(pod.node_selector) == {"towline.dev/steps": "true", "kubernetes.io/os": "linux"}
    assert pod.tolerations == (toleration, {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60})


@pytest.mark.parametrize(("env", "message"), [
    ({"TOWLINE_STEP_IMAGE_PULL_SECRETS": "Reg_Cred"}, r"'Reg_Cred' is not a Secret name; set stepPods\.imagePull"),
    ({"TOWLINE_STEP_NODE_SELECTOR": "pool=steps"}, r"TOWLINE_STEP_NODE_SELECTOR is not JSON .*stepPods\.nodeSelector"),
    ({"TOWLINE_STEP_NODE_SELECTOR": '["pool"]'}, r"must be a JSON object; set stepPods\.nodeSelector"),
    ({"TOWLINE_STEP_NODE_SELECTOR": '{"pool": 3}'}, r"the value of 'pool' must be a string.*stepPods\.nodeSelector"),
    ({"TOWLINE_STEP_NODE_SELECTOR": '{"bad key": "x"}'}, r"label key 'bad key'.*stepPods\.nodeSelector"),
    ({"TOWLINE_STEP_NODE_SELECTOR": '{"pool": "two words"}'}, r"'two words', is not a label value"),
    ({"TOWLINE_STEP_TOLERATIONS": '{"key": "a"}'}, r"must be a JSON list; set stepPods\.tolerations"),
    ({"TOWLINE_STEP_TOLERATIONS": "[not json"}, r"TOWLINE_STEP_TOLERATIONS is not JSON .*stepPods\.tolerations"),
    ({"TOWLINE_STEP_TOLERATIONS": '["dedicated"]'}, r"TOWLINE_STEP_TOLERATIONS\[0\]: \"dedicated\" is not an object"),
    ({"TOWLINE_STEP_TOLERATIONS": '[{"key": "a", "operater": "Exists"}]'}, r"\[0\]: unknown field 'operater'"),
    ({"TOWLINE_STEP_TOLERATIONS": '[{"key": "a", "operator": "In"}]'}, r"operator must be Equal or Exists"),
    ({"TOWLINE_STEP_TOLERATIONS": '[{"key": "a", "operator": "Exists", "value": "b"}]'}, r"Exists has no value"),
    ({"TOWLINE_STEP_TOLERATIONS": '[{"value": "b"}]'}, r"without a key must have operator Exists"),
    ({"TOWLINE_STEP_TOLERATIONS": '[{"key": "a", "effect": "NoRun"}]'}, r"effect must be one of"),
    ({"TOWLINE_STEP_TOLERATIONS": '[{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}]'},
     r"tolerationSeconds applies only to effect NoExecute"),
    ({"TOWLINE_STEP_TOLERATIONS": '[{"key": "a", "effect": "NoExecute", "tolerationSeconds": "5"}]'},
     r"tolerationSeconds must be a whole number"),
    ({"TOWLINE_STEP_TOLERATIONS": '[{}, {"key": 1}]'}, r"TOWLINE_STEP_TOLERATIONS\[0\]: a toleration without a key"),
    ({"TOWLINE_STEP_LABELS": '{"towline.dev/step-pod": "false"}'},
     r"label 'towline.dev/step-pod' is Towline's own .*stepPods\.labels"),
    ({"TOWLINE_STEP_LABELS": '{"egress.towline.dev/x": "y"}'}, r"'egress.towline.dev/x' is Towline's own"),
    ({"TOWLINE_STEP_LABELS": '{"team": "two words"}'}, r"'two words', is not a label value; set stepPods\.labels"),
    ({"TOWLINE_STEP_ANNOTATIONS": '{"towline.dev/step-id": "x"}'},
     r"annotation 'towline.dev/step-id' is Towline's own .*stepPods\.annotations"),
    ({"TOWLINE_STEP_ANNOTATIONS": '{"sidecar.istio.io/inject": false}'}, r"must be a string, not false \(quote it\)"),
    ({"TOWLINE_STEP_AFFINITY": '{"nodeAffinty": {}}'}, r"unknown field 'nodeAffinty'.*stepPods\.affinity"),
    ({"TOWLINE_STEP_PRIORITY_CLASS_NAME": "Steps_High"}, r"not a PriorityClass name; set stepPods\.priorityClassName"),
    ({"TOWLINE_STEP_RESOURCES": '{"limits": {"cpu": "one"}}'},
     r"limits\.cpu 'one' is not a quantity .*stepPods\.resources"),
    ({"TOWLINE_STEP_RESOURCES": '{"limits": {"gpu": "1"}}'}, r"limits must be an object of cpu and memory"),
    ({"TOWLINE_STEP_RESOURCES": '{"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}'},
     r"limits\.cpu \(1\) is below requests\.cpu \(2\): raise stepPods\.resources\.limits\.cpu"),
])
def test_a_bad_setting_stops_the_operator_at_start_naming_the_chart_value(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings(**env)


def test_without_the_variables_step_pods_get_cpu_and_memory_limits_and_keep_a_mesh_out() -> None:
    pod = settings().pod_settings
    assert pod.resources == {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
    assert dict(pod.annotations) == {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}
    assert (dict(pod.labels), dict(pod.affinity), pod.priority_class_name) == ({}, {}, "")


def test_labels_annotations_resources_affinity_and_priority_class_are_read() -> None:
    pod = settings(
        TOWLINE_STEP_LABELS='{"cost-center": "ops-42"}', TOWLINE_STEP_ANNOTATIONS="{}",
        TOWLINE_STEP_RESOURCES='{"requests": {"cpu": 0.1}, "limits": {"cpu": 2, "memory": "1Gi"}}',
        TOWLINE_STEP_AFFINITY='{"nodeAffinity": {}}', TOWLINE_STEP_PRIORITY_CLASS_NAME="towline-steps",
    ).pod_settings
    assert (dict(pod.labels), dict(pod.annotations)) == ({"cost-center": "ops-42"}, {})
    # Numbers as YAML writes them (`cpu: 2`) become the quantities Kubernetes reads them as.
    assert pod.resources == {"requests": {"cpu": "0.1"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    assert (dict(pod.affinity), pod.priority_class_name) == ({"nodeAffinity": {}}, "towline-steps")
