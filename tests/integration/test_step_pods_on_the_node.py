"""Step pods as the chart's stepPods values make them, on the real node: under a namespace ResourceQuota that
requires CPU and memory limits a built-in step runs, and its pod carries the chart's labels and annotations beside
Towline's own, which select it for its NetworkPolicies.

The session operator is restarted for these tests with the step pod environment `helm template` gives the chart's
operator (tests/integration/test_chart_step_pods.py shows the operator reads exactly that).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.integration.helmsupport import find, render
from tests.integration.support import (
    apply,
    bind_role,
    get,
    list_objects,
    start_run,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline_dev.binaries import BinarySet
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = pytest.mark.integration

CHART_VALUES = {
    "stepPods.labels": json.dumps({"cost-center": "ops-42", "example.com/team": "payments"}),
    "stepPods.annotations": json.dumps({"example.com/owner": "platform"}),
}
QUOTA = {"limits.cpu": "4", "limits.memory": "4Gi", "requests.cpu": "2", "requests.memory": "2Gi"}


def chart_step_pod_environment(binaries: BinarySet, values: dict[str, str]) -> dict[str, str]:
    """The TOWLINE_STEP_* variables the chart's operator Deployment gets for `values`."""
    deployment = find(render(binaries, values), "Deployment", "towline-operator")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return {v["name"]: v["value"] for v in env if v["name"].startswith("TOWLINE_STEP_") and "value" in v}


@pytest.fixture
def chart_operator(towline_operator: OperatorProcess, k8s_binaries: BinarySet, tmp_path: Path,
                   ) -> Iterator[OperatorProcess]:
    """The session operator with the chart's step pod settings, for the test only; the session's is back after."""
    settings = {**towline_operator.settings, **chart_step_pod_environment(k8s_binaries, CHART_VALUES)}
    towline_operator.stop()
    charted = replace(towline_operator, settings=settings, log_path=tmp_path / "operator.log", process=None)
    try:
        yield charted.start()
    finally:
        charted.stop()
        towline_operator.start()


def limits_quota(cluster: ControlPlane, namespace: str) -> None:
    """A ResourceQuota on CPU and memory limits: the API server then refuses every pod a container of which sets
    no CPU or memory limit ("must specify limits.cpu"), once the quota controller has counted the namespace."""
    apply(cluster, {"apiVersion": "v1", "kind": "ResourceQuota",
                    "metadata": {"name": "compute", "namespace": namespace}, "spec": {"hard": QUOTA}})
    wait_for("the quota controller to count the namespace",
             lambda: ((get(cluster, "resourcequota", "compute", namespace) or {}).get("status") or {}).get("hard"))


def step_pod(cluster: ControlPlane, namespace: str, run: str, step: str) -> dict[str, Any]:
    (pod,) = list_objects(cluster, "pods", namespace, f"towline.dev/run={run},towline.dev/step={step}")
    return pod


def test_a_built_in_step_runs_under_a_quota_that_requires_cpu_limits(
    chart_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    limits_quota(cluster, ns)
    apply(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "quota", "namespace": ns},
        "spec": {"steps": [
            {"id": "shape", "action": "data.transform", "with": {"data": {"n": 2}, "fields": {"double": "data.n * 2"}}},
            {"id": "sized", "action": "data.transform", "needs": ["shape"],
             "resources": {"requests": {"cpu": "100m", "memory": "96Mi"}, "limits": {"cpu": "300m"}},
             "with": {"data": {"n": 3}, "fields": {"triple": "data.n * 3"}}},
        ]},
    })
    run = start_run(cluster, ns, "quota")
    done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert step_status(done, "sized")["output"] == {"triple": 9}
    (shape,) = step_pod(cluster, ns, run, "shape")["spec"]["containers"]
    assert shape["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"},
                                  "limits": {"cpu": "1", "memory": "256Mi"}}
    (sized,) = step_pod(cluster, ns, run, "sized")["spec"]["containers"]
    assert sized["resources"] == {"requests": {"cpu": "100m", "memory": "96Mi"},
                                  "limits": {"cpu": "300m", "memory": "256Mi"}}


def test_a_step_pod_carries_the_charts_labels_and_annotations_beside_towlines_own(
    chart_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "labelled", "namespace": ns},
        "spec": {"steps": [{"id": "shape", "action": "data.transform",
                            "podMetadata": {"labels": {"example.com/step-cost": "report"},
                                            "annotations": {"example.com/owner": "payments"}},
                            "with": {"data": {"n": 2}, "fields": {"double": "data.n * 2"}}}]},
    })
    run = start_run(cluster, ns, "labelled")
    done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
    # It succeeded, so it passed its isolation check: the default-deny policy selected it by Towline's label.
    assert done["status"]["phase"] == "Succeeded", done["status"]
    metadata = step_pod(cluster, ns, run, "shape")["metadata"]
    assert {key: metadata["labels"][key] for key in ("cost-center", "example.com/team", "example.com/step-cost",
                                                      "towline.dev/step-pod", "towline.dev/run")} == {
        "cost-center": "ops-42", "example.com/team": "payments", "example.com/step-cost": "report",
        "towline.dev/step-pod": "true", "towline.dev/run": run}
    # The step's own annotation over the chart's of the same key.
    assert metadata["annotations"] == {"example.com/owner": "payments", "sidecar.istio.io/inject": "false",
                                       "linkerd.io/inject": "disabled"}


@pytest.mark.parametrize(("resources", "field"), [
    ({"requests": {"cpu": "500m"}, "limits": {"cpu": "200m"}}, "spec.steps[0].resources.limits.cpu"),
    ({"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}}, "spec.steps[0].resources.limits.memory"),
])
def test_the_api_server_refuses_a_step_whose_limit_is_below_its_request_naming_the_field(
    towline_installed: ControlPlane, namespace: str, resources: dict[str, Any], field: str,
) -> None:
    result = apply(towline_installed, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "sized", "namespace": namespace},
        "spec": {"steps": [{"id": "shape", "action": "data.transform", "resources": resources,
                            "with": {"data": {}, "fields": {}}}]},
    }, check=False)
    assert result.returncode != 0
    name = field.rsplit(".", 1)[1]
    assert field in result.stderr and f"limits.{name} must be at least requests.{name}" in result.stderr, result.stderr


@pytest.mark.parametrize("key", ["towline.dev/step-pod", "towline.dev/run", "towline.dev/egress"])
def test_a_workflow_author_cannot_give_a_step_pod_towlines_own_labels(
    towline_installed: ControlPlane, namespace: str, key: str,
) -> None:
    # towline.dev/step-pod=false would take the pod out of the default-deny policy; another run's towline.dev/run
    # or towline.dev/egress would put it under that run's egress policy.
    bind_role(towline_installed, namespace, "towline-workflow-author", users=("alice",))
    result = apply(towline_installed, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "escape", "namespace": namespace},
        "spec": {"steps": [{"id": "shape", "action": "data.transform", "podMetadata": {"labels": {key: "x"}},
                            "with": {"data": {}, "fields": {}}}]},
    }, user="alice", check=False)
    assert result.returncode != 0
    assert "spec.steps[0].podMetadata.labels" in result.stderr and "towline.dev/ keys are Towline's own" in \
        result.stderr, result.stderr


def test_a_subdomain_of_towlines_prefix_makes_the_workflow_not_ready_naming_the_field(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    # The API server checks the prefix itself (a key's length is unbounded for CEL's cost); the operator the rest.
    apply(towline_installed, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "sub", "namespace": team_namespace},
        "spec": {"steps": [{"id": "shape", "action": "data.transform",
                            "podMetadata": {"labels": {"egress.towline.dev/group": "x"}},
                            "with": {"data": {}, "fields": {}}}]},
    })

    def not_ready() -> str:
        status = (get(towline_installed, "workflow", "sub", team_namespace) or {}).get("status") or {}
        ready = [c for c in status.get("conditions") or [] if c["type"] == "Ready" and c["status"] == "False"]
        return json.dumps(status) if ready else ""

    status = wait_for("the Workflow to be not Ready", not_ready)
    assert "podMetadata" in status and "egress.towline.dev/group" in status, status
