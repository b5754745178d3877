"""Attacks on the operator through CEL: an expensive expression fails its own step, other runs keep going.

carol supplies a run's params. The workflow's `when` nests two comprehensions
over a list param, harmless for a few items; carol passes hundreds, which
without a bound would hold the operator for minutes. The step must fail before
its Job exists, with a message saying why, while another run of another
workflow completes meanwhile. A workflow whose expression is too costly
whatever its data is refused as invalid, naming the field.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.support import apply, create, get, list_objects, step_status, wait_for, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = pytest.mark.integration

NESTED = "params.items.map(a, params.items.map(b, params.items.map(c, a + b + c))).size() > 0"


def run_with(cluster: ControlPlane, namespace: str, workflow: str, name: str, params: dict[str, Any]) -> None:
    create(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"workflowRef": {"name": workflow}, "requestedBy": "carol", "params": params},
    }, user="carol")


def transform_workflow(namespace: str, name: str, when: str | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"id": "shape", "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}}
    if when is not None:
        step["when"] = when
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"params": [{"name": "items", "type": "array", "default": []}], "steps": [step]},
    }


def test_an_expensive_expression_fails_its_own_step_and_other_runs_keep_progressing(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, transform_workflow(ns, "nested", NESTED))
    apply(cluster, transform_workflow(ns, "plain"))
    run_with(cluster, ns, "nested", "small-run", {"items": [1, 2, 3]})
    assert wait_for_phase(cluster, ns, "small-run", {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"

    # 250 items: inside the API server's bound on one list in params (256), far beyond what three
    # nested comprehensions may walk (about 7 items): the cost bound, not the size bound, must stop it.
    run_with(cluster, ns, "nested", "stall-run", {"items": list(range(250))})
    run_with(cluster, ns, "plain", "bystander-run", {})
    stalled = wait_for_phase(cluster, ns, "stall-run", {"Succeeded", "Failed"}, timeout=60)
    assert stalled["status"]["phase"] == "Failed"
    step = step_status(stalled, "shape")
    assert step["errorClass"] == "validation" and "too expensive to evaluate" in step["message"]
    assert list_objects(cluster, "jobs", ns, "towline.dev/run=stall-run") == []
    assert wait_for_phase(cluster, ns, "bystander-run", {"Succeeded", "Failed"}, timeout=60)["status"]["phase"] \
        == "Succeeded"


def test_an_expression_too_costly_whatever_its_data_makes_the_workflow_invalid(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    literal = "[" + ",".join(str(i) for i in range(200)) + "]"
    apply(cluster, transform_workflow(ns, "costly", f"{literal}.map(a, {literal}.map(b, a + b)).size() > 0"))

    def not_ready() -> dict[str, Any] | None:
        found = get(cluster, "workflows.towline.dev", "costly", ns) or {}
        conditions = (found.get("status") or {}).get("conditions", [])
        return found if any(c["type"] == "Ready" and c["status"] == "False" for c in conditions) else None

    found = wait_for("the Workflow to be marked not Ready", not_ready)
    errors = found["status"]["validationErrors"]
    assert [e["field"] for e in errors] == ["spec.steps[0].when"]
    assert "too expensive to evaluate" in errors[0]["message"]
    run_with(cluster, ns, "costly", "costly-run", {})
    failed = wait_for_phase(cluster, ns, "costly-run", {"Failed", "Succeeded"})
    assert failed["status"]["phase"] == "Failed" and "spec.steps[0].when" in failed["status"]["message"]
    assert list_objects(cluster, "jobs", ns, "towline.dev/run=costly-run") == []
