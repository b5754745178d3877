"""Subflows on the real node: a parent run runs a shared change-approval Workflow as a child run, whose gate an
approver decides (and the parent's requester may not, under four eyes); the parent's outputs carry the child's;
cancelling the parent cancels the child; retrying a parent whose child failed retries that child, reusing its
Succeeded steps; a Workflow that does not allow subflows is refused as one, and one deleted makes its callers not
Ready; the child's requestedBy is the parent's requester and cannot be forged through the parent; the depth limit's
message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.attacks.attack_support import create_as, refused, run_manifest, wait_until_policies_enforced
from tests.integration.support import (
    ScriptedServer,
    apply,
    decide,
    get,
    list_objects,
    ready,
    start_run,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline.api.subflows import MAX_SUBFLOW_DEPTH
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

RUNS = "workflowruns.towline.dev"


def change_approval(namespace: str, *, allowed: bool = True, name: str = "change-approval") -> dict[str, Any]:
    """The shared tail: open a change record, wait for the change manager (four eyes), close it."""
    spec: dict[str, Any] = {
        "params": [{"name": "change", "type": "string", "required": True}],
        "steps": [
            {"id": "review", "approval": {"message": "change ${{ params.change }}?",
                                          "approvers": {"users": ["bob", "carol"]}, "fourEyes": True,
                                          "expiresAfter": "10m"}},
            {"id": "close", "needs": ["review"], "action": "data.transform",
             "with": {"data": {"c": "${{ params.change }}"}, "fields": {"ticket": "'CHG-' + data.c"}}},
        ],
        "outputs": {"ticket": "steps.close.output.ticket"},
    }
    if allowed:
        spec["subflow"] = {"allowed": True}
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def release(namespace: str, calls: str = "change-approval") -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "release", "namespace": namespace},
            "spec": {"steps": [{"id": "change", "workflow": {"name": calls, "params": {"change": "42"}}}],
                     "outputs": {"ticket": "steps.change.output.ticket"}}}


def install(cluster: ControlPlane, *workflows: dict[str, Any]) -> None:
    for manifest in workflows:
        apply(cluster, manifest)
    for manifest in workflows:
        condition = ready(cluster, "workflows.towline.dev", manifest["metadata"]["name"],
                          manifest["metadata"]["namespace"])
        assert condition["status"] == "True", condition


def child_of(cluster: ControlPlane, namespace: str, run: str, step: str = "change") -> dict[str, Any]:
    """The parent's step's child run, once the step records it and it exists."""
    def found() -> dict[str, Any] | None:
        parent = get(cluster, RUNS, run, namespace) or {}
        name = next((s.get("childRun") for s in (parent.get("status") or {}).get("steps", []) if s["id"] == step),
                    None)
        return get(cluster, RUNS, name, namespace) if name else None

    return dict(wait_for(f"the child run of {run}'s step {step}", found))


def test_a_parent_runs_a_gated_subflow_whose_approval_an_approver_decides_and_gets_its_outputs(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, change_approval(ns), release(ns))
    parent = get(cluster, RUNS, start_run(cluster, ns, "release", "release-1", user="carol"), ns)
    assert parent is not None
    child = child_of(cluster, ns, "release-1")
    assert child["spec"]["requestedBy"] == "carol"
    assert child["spec"]["trigger"]["type"] == "parent"
    assert child["spec"]["trigger"]["parent"]["run"] == "release-1"
    [owner] = child["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("WorkflowRun", parent["metadata"]["uid"], True)
    child = wait_for_phase(cluster, ns, child["metadata"]["name"], {"AwaitingApproval"})
    approval = step_status(child, "review")["approvalName"]
    wait_for("the child's Approval", lambda: get(cluster, "approvals.towline.dev", approval, ns))
    # carol started the parent, so four eyes refuses her in the child
    refused(decide(cluster, ns, approval, "carol"), "four-eyes approval: carol")
    assert decide(cluster, ns, approval, "bob").returncode == 0
    done = wait_for_phase(cluster, ns, "release-1", {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert done["status"]["outputs"] == {"ticket": "CHG-42"}
    assert step_status(done, "change")["output"] == {"ticket": "CHG-42"}
    snapshot = done["status"]["workflowSpec"]["subflows"]["change-approval"]
    workflow = get(cluster, "workflows.towline.dev", "change-approval", ns)
    assert workflow is not None
    assert snapshot == {"uid": workflow["metadata"]["uid"], "generation": workflow["metadata"]["generation"]}


def test_cancelling_the_parent_cancels_the_child(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, change_approval(ns), release(ns))
    start_run(cluster, ns, "release", "release-2", user="carol")
    child = child_of(cluster, ns, "release-2")
    name = child["metadata"]["name"]
    wait_for_phase(cluster, ns, name, {"AwaitingApproval"})
    cluster.kubectl("patch", RUNS, "release-2", "-n", ns, "--type", "merge", "-p",
                    json.dumps({"spec": {"cancel": True}}), user="carol")
    assert wait_for_phase(cluster, ns, name, {"Cancelled"})["spec"]["cancel"] is True
    assert wait_for_phase(cluster, ns, "release-2", {"Cancelled"})["status"]["phase"] == "Cancelled"


def test_retrying_a_parent_retries_its_failed_child_reusing_the_childs_succeeded_step(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        fetch = api.script("/fetch", (200, {"n": 3}, {}))
        push = api.script("/push", (400, {"error": "quota"}, {}), (200, {"pushed": 3}, {}))
        http = {"action": "http.request"}
        child_workflow = {
            "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "sync", "namespace": ns},
            "spec": {"subflow": {"allowed": True}, "steps": [
                {"id": "fetch", **http, "with": {"url": f"{api.url}/fetch", "select": "response.body"}},
                {"id": "push", "needs": ["fetch"], **http, "retry": {"limit": 0},
                 "with": {"url": f"{api.url}/push", "method": "POST", "json": {"n": "${{ steps.fetch.output.n }}"},
                          "select": "response.body"}},
            ], "outputs": {"pushed": "steps.push.output.pushed"}}}
        parent_workflow = {
            "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "nightly", "namespace": ns},
            "spec": {"steps": [{"id": "sync", "workflow": {"name": "sync"}}],
                     "outputs": {"pushed": "steps.sync.output.pushed"}}}
        install(cluster, child_workflow, parent_workflow)
        start_run(cluster, ns, "nightly", "nightly-1", user="carol")
        assert wait_for_phase(cluster, ns, "nightly-1", {"Succeeded", "Failed"})["status"]["phase"] == "Failed"
        first_child = child_of(cluster, ns, "nightly-1", "sync")
        assert step_status(first_child, "fetch")["phase"] == "Succeeded"
        assert step_status(first_child, "push")["phase"] == "Failed"

        # The cause is fixed (the server answers 200 now); bob retries carol's run.
        retry = run_manifest(ns, "nightly", "nightly-2", "bob")
        retry["spec"]["retryOf"] = {"run": "nightly-1", "reuse": []}
        assert create_as(cluster, "bob", retry).returncode == 0
        done = wait_for_phase(cluster, ns, "nightly-2", {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
        assert done["status"]["outputs"] == {"pushed": 3}
        child = child_of(cluster, ns, "nightly-2", "sync")
        assert child["spec"]["retryOf"] == {"run": first_child["metadata"]["name"], "reuse": ["fetch"]}
        assert child["spec"]["requestedBy"] == "bob"
        assert "carol" in child["status"]["earlierRequesters"]
        assert step_status(child, "fetch")["reason"] == "Reused"
        assert len(fetch.requests) == 1, "the child's Succeeded step did not run again"
        assert len(push.requests) == 2
        jobs = list_objects(cluster, "jobs", ns, f"towline.dev/run={child['metadata']['name']}")
        assert [job["metadata"]["labels"]["towline.dev/step"] for job in jobs] == ["push"]

    # The called Workflow deleted: its caller is no longer Ready, naming it at the step's field.
    cluster.kubectl("delete", "workflows.towline.dev", "sync", "-n", ns)

    def missing() -> list[dict[str, Any]]:
        stored = get(cluster, "workflows.towline.dev", "nightly", ns) or {}
        return [error for error in (stored.get("status") or {}).get("validationErrors") or []
                if error["field"] == "spec.steps[0].workflow.name" and "no Workflow 'sync'" in error["message"]]

    wait_for("nightly not Ready naming the deleted Workflow sync", missing)


def test_a_workflow_not_marked_usable_as_a_subflow_is_refused_as_one(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, change_approval(ns, allowed=False, name="private"))
    apply(cluster, release(ns, calls="private"))
    condition = ready(cluster, "workflows.towline.dev", "release", ns)
    assert condition["status"] == "False"
    stored = get(cluster, "workflows.towline.dev", "release", ns)
    assert stored is not None
    assert {"field": "spec.steps[0].workflow.name",
            "message": "Workflow 'private' does not allow runs as a subflow: set spec.subflow.allowed: true in it, "
                       "or call another"} in stored["status"]["validationErrors"]
    start_run(cluster, ns, "release", "release-3", user="carol")
    failed = wait_for_phase(cluster, ns, "release-3", {"Failed"})
    assert "does not allow runs as a subflow" in failed["status"]["message"]
    assert not [s for s in failed["status"].get("steps", []) if s.get("childRun")]


def test_the_childs_requester_is_the_parents_and_cannot_be_forged_through_the_parent(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    wait_until_policies_enforced(cluster)
    install(cluster, change_approval(ns), release(ns))
    start_run(cluster, ns, "release", "release-4", user="carol")
    parent = get(cluster, RUNS, "release-4", ns)
    assert parent is not None
    uid = parent["metadata"]["uid"]
    child = child_of(cluster, ns, "release-4")
    assert child["spec"]["requestedBy"] == "carol"
    # bob, a runner, makes a child of carol's run of his own: as carol, or as himself, owned by her run
    trigger = {"type": "parent", "parent": {"run": "release-4", "uid": uid, "step": "change",
                                            "chain": ["release"]}}
    owned = {"ownerReferences": [{"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun", "name": "release-4",
                                  "uid": uid, "controller": True}]}
    for requester in ("carol", "bob"):
        forged = run_manifest(ns, "change-approval", f"forged-{requester}", requester, trigger=trigger,
                              params={"change": "666"})
        forged["metadata"].update(owned)
        refused(create_as(cluster, "bob", forged), "Forbidden")
    # bob takes the next child's name first, with a manual run of his own: it is never adopted
    squat = run_manifest(ns, "change-approval", "release-5-change", "bob", params={"change": "666"})
    assert create_as(cluster, "bob", squat).returncode == 0
    start_run(cluster, ns, "release", "release-5", user="carol")
    failed = wait_for_phase(cluster, ns, "release-5", {"Failed"})
    change = step_status(failed, "change")
    assert change["reason"] == "ChildRunForeign", change
    assert "that this run did not start" in change["message"]
    assert change.get("output") is None and failed["status"].get("outputs") is None


def test_subflows_deeper_than_the_limit_fail_naming_the_chain(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    levels = MAX_SUBFLOW_DEPTH + 2
    names = [f"level-{index}" for index in range(levels)]
    manifests = []
    for index, name in enumerate(names):
        step = ({"id": "next", "workflow": {"name": names[index + 1]}} if index + 1 < levels
                else {"id": "leaf", "action": "data.transform", "with": {"data": {}, "fields": {"done": "true"}}})
        manifests.append({"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                          "metadata": {"name": name, "namespace": ns},
                          "spec": {"subflow": {"allowed": True}, "steps": [step]}})
    install(cluster, *reversed(manifests))
    start_run(cluster, ns, names[0], "deep-1", user="carol")
    failed = wait_for_phase(cluster, ns, "deep-1", {"Failed"}, timeout=180)
    chain = " -> ".join(names)
    assert f"subflows nest at most {MAX_SUBFLOW_DEPTH} deep" in failed["status"]["message"]
    assert chain in json.dumps(failed["status"])
