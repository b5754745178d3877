"""Attacks on triggers and names: only triggers create trigger runs, and no run takes another's objects."""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.attacks.attack_support import (
    AS_INGRESS,
    INGRESS,
    RUNS,
    create_as,
    echo_workflow,
    install,
    jobs_of,
    refused,
    run_manifest,
)
from tests.integration.support import bind_role, get, list_objects, step_status, wait_for_phase

from towline.engine import job_name
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OPERATOR_USER, OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]


@pytest.mark.parametrize("trigger", [
    {"type": "webhook", "name": "deploy_hook", "deliveryId": "d-1", "data": {"ref": "main"}},
    {"type": "schedule", "name": "nightly", "scheduledTime": "2026-11-30T02:00:00Z"},
], ids=["webhook", "schedule"])
def test_carol_cannot_create_a_trigger_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
    trigger: dict[str, object],
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    forged = run_manifest(ns, "echo", "forged", "carol", trigger=trigger)
    refused(create_as(cluster, "carol", forged),
            f"spec.trigger.type {trigger['type']} runs are started by Towline's {trigger['type']} trigger",
            "leave spec.trigger out")
    assert get(cluster, RUNS, "forged", ns) is None
    assert jobs_of(cluster, ns, "forged") == []


def test_a_manual_run_cannot_carry_trigger_data(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    forged = run_manifest(ns, "echo", "forged", "carol", trigger={"type": "manual", "data": {"ref": "main"}})
    refused(create_as(cluster, "carol", forged), "a manual run carries none of them")
    assert get(cluster, RUNS, "forged", ns) is None


def test_schedule_run_names_are_reserved(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """Squatting the next slot's name would otherwise make the schedule adopt carol's run as fired."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    squat = run_manifest(ns, "echo", "echo-nightly-202612010200", "carol")
    refused(create_as(cluster, "carol", squat), "reserved for scheduled runs")
    assert get(cluster, RUNS, "echo-nightly-202612010200", ns) is None


def hooked_workflow(namespace: str) -> dict[str, Any]:
    """The echo workflow with a webhook trigger `deploy_hook` (unsigned: these runs are created directly)."""
    workflow = echo_workflow(namespace, "hooked")
    workflow["spec"]["triggers"] = [{"name": "deploy_hook", "webhook": {"verify": {"scheme": "none",
                                                                                   "allowUnsigned": True}}}]
    return workflow


def as_ingress(cluster: ControlPlane, manifest: dict[str, Any]) -> Any:
    return create_as(cluster, "admin", manifest, *AS_INGRESS)


WEBHOOK = {"type": "webhook", "name": "deploy_hook", "deliveryId": "d-1", "data": {"ref": "main"}}


def test_the_ingress_identity_may_create_webhook_runs(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """What carol may not do, the webhook ingress's ServiceAccount may (RBAC aside, which the chart grants it)."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, hooked_workflow(ns))
    bind_role(cluster, ns, "towline-runner", users=(INGRESS,))
    delivered = run_manifest(ns, "hooked", "hooked-hook-d1", INGRESS, params={"who": "hook"}, trigger=WEBHOOK)
    created = as_ingress(cluster, delivered)
    assert created.returncode == 0, created.stderr
    done = wait_for_phase(cluster, ns, "hooked-hook-d1", {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["spec"]["trigger"]["type"] == "webhook"


@pytest.mark.parametrize(("case", "spec", "reason"), [
    pytest.param("manual", {"requestedBy": INGRESS}, "creates only webhook runs", id="manual"),
    pytest.param("schedule", {"requestedBy": INGRESS, "trigger": {"type": "schedule", "name": "nightly",
                                                                  "scheduledTime": "2026-11-30T02:00:00Z"}},
                 "creates only webhook runs", id="schedule"),
    pytest.param("someone-else", {"requestedBy": "carol", "trigger": WEBHOOK},
                 "name the ingress as spec.requestedBy", id="requested-by-carol"),
    pytest.param("no-requester", {"trigger": WEBHOOK}, "name the ingress as spec.requestedBy", id="no-requester"),
    pytest.param("retry", {"requestedBy": INGRESS, "trigger": WEBHOOK, "retryOf": {"run": "earlier"}},
                 "does not retry runs", id="retry"),
])
def test_a_compromised_ingress_can_create_only_webhook_runs_as_itself(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
    case: str, spec: dict[str, Any], reason: str,
) -> None:
    """The ingress's identity (policy towline-ingress-runs): webhook runs, requested by itself, never a retry."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, hooked_workflow(ns))
    bind_role(cluster, ns, "towline-runner", users=(INGRESS,))
    forged = {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
              "metadata": {"name": f"forged-{case}", "namespace": ns},
              "spec": {"workflowRef": {"name": "hooked"}, **spec}}
    refused(as_ingress(cluster, forged), reason)
    assert get(cluster, RUNS, f"forged-{case}", ns) is None


def test_a_webhook_run_of_a_trigger_the_workflow_does_not_declare_fails_before_any_job(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """The API server cannot read the Workflow; the operator does, and the run fails at once naming why."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    install(cluster, hooked_workflow(ns))
    bind_role(cluster, ns, "towline-runner", users=(INGRESS,))
    undeclared = {**WEBHOOK, "name": "other"}
    for run, workflow, trigger in (("no-hooks", "echo", WEBHOOK), ("other-hook", "hooked", undeclared)):
        created = as_ingress(cluster, run_manifest(ns, workflow, run, INGRESS, trigger=trigger))
        assert created.returncode == 0, created.stderr
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Failed", done["status"]
        assert f"declares no webhook trigger named {trigger['name']!r}" in done["status"]["message"]
        assert jobs_of(cluster, ns, run) == []


def test_runs_whose_names_differ_only_in_dots_get_their_own_jobs(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """`a.b` and `a-b` once mapped to the same Job name, and the second run adopted the first's Job."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    for name, who in (("team.deploy", "dotted"), ("team-deploy", "dashed")):
        assert create_as(cluster, "carol", run_manifest(ns, "echo", name, "carol", params={"who": who})).returncode == 0
    outputs = {}
    for name in ("team.deploy", "team-deploy"):
        done = wait_for_phase(cluster, ns, name, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"]
        outputs[name] = step_status(done, "deploy")["output"]["who"]
        [job] = jobs_of(cluster, ns, name, "deploy")
        owners = [o["uid"] for o in job["metadata"]["ownerReferences"] if o.get("controller")]
        assert owners == [done["metadata"]["uid"]], f"{name}'s Job is controlled by {name}"
    assert outputs == {"team.deploy": "dotted", "team-deploy": "dashed"}
    assert job_name("team.deploy", "deploy", 1) != job_name("team-deploy", "deploy", 1)
    assert len(list_objects(cluster, "jobs", ns)) == 2


AS_OPERATOR = (f"--as={OPERATOR_USER}", "--as-group=system:serviceaccounts", "--as-group=system:authenticated")
"""kubectl arguments (for admin) that act as the operator: a trusted trigger-run creator."""


def child_manifest(
    namespace: str, name: str, parent: dict[str, Any], *, owner: dict[str, Any] | None,
) -> dict[str, Any]:
    """A child run of `echo` whose trigger names `parent` (a run's metadata) and whose controller is `owner`."""
    manifest = run_manifest(namespace, "echo", name, "carol", trigger={
        "type": "parent",
        "parent": {"run": parent["name"], "uid": parent["uid"], "step": "deploy", "chain": ["echo"]},
    })
    if owner is not None:
        manifest["metadata"]["ownerReferences"] = [{
            "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun", "name": owner["name"], "uid": owner["uid"],
            "controller": True, "blockOwnerDeletion": True,
        }]
    return manifest


def test_a_child_run_must_be_controlled_by_the_run_its_trigger_names_even_for_the_operator(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """Policy towline-trigger-runs: a `parent` run claims a parent only as that parent's controlled child.

    Even the operator's identity (a trusted trigger-run creator) cannot make a run that names one run as its
    parent while nothing, or another run, controls it: the claim (which the operator reads to hand outputs to
    the parent) and the owner (which the garbage collector and the cancel/retry paths follow) are one. Carol
    cannot make a `parent` run at all. Each create is a server-side dry run (admission runs in full; nothing stays).
    """
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    runs = {}
    for name in ("parent-run", "other-run"):
        assert create_as(cluster, "carol", run_manifest(ns, "echo", name, "carol")).returncode == 0
        made = get(cluster, RUNS, name, ns)
        assert made is not None, name
        runs[name] = made["metadata"]
    parent, other = runs["parent-run"], runs["other-run"]

    def as_operator(manifest: dict[str, Any]) -> Any:
        return create_as(cluster, "admin", manifest, "--dry-run=server", *AS_OPERATOR)

    claim = "must be controlled by the WorkflowRun spec.trigger.parent names"
    forged_uid = {**parent, "uid": other["uid"]}
    for case, owner in (("unowned", None), ("owned-by-another", other), ("owner-uid-forged", forged_uid)):
        message = refused(as_operator(child_manifest(ns, f"child-{case}", parent, owner=owner)))
        assert claim in " ".join(message.split()), f"{case}: {message}"

    admitted = as_operator(child_manifest(ns, "child-of-parent", parent, owner=parent))
    assert admitted.returncode == 0, admitted.stderr

    refused(create_as(cluster, "carol", child_manifest(ns, "child-by-carol", parent, owner=parent)),
            "spec.trigger.type parent runs are started by Towline's operator for a subflow step of their parent run")
    assert get(cluster, RUNS, "child-of-parent", ns) is None
