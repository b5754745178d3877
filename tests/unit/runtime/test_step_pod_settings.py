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
])
def test_a_bad_setting_stops_the_operator_at_start_naming_the_chart_value(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings(**env)
