"""forEach on the real node: instances are steps of their own, paced by maxParallel, stopped by failFast, and
gated one Approval each, which the chart's admission policy checks per instance as any gate."""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.support import (
    ScriptedServer,
    apply,
    decide,
    get,
    list_objects,
    start_run,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

CLUSTERS = [f"cluster-{n:02d}" for n in range(20)]


def loop_workflow(namespace: str, name: str, loop: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"steps": [loop]}}


def live_step_pods(cluster: ControlPlane, namespace: str, run: str) -> list[str]:
    """The run's step pods that have not ended (scheduled, starting or running)."""
    pods = list_objects(cluster, "pods", namespace, f"towline.dev/run={run}")
    return [pod["metadata"]["name"] for pod in pods
            if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")]


def test_a_loop_of_20_runs_at_most_3_instance_pods_at_once_and_outputs_in_item_order(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, loop_workflow(ns, "rollout", {
        "id": "deploy", "action": "data.transform",
        "forEach": {"items": CLUSTERS, "maxParallel": 3},
        "with": {"data": {"cluster": "${{ item }}", "n": "${{ index }}"},
                 "fields": {"deployed": "data.cluster + '#' + string(data.n)"}},
    }))
    run = start_run(cluster, ns, "rollout")
    most = 0

    def ended_with_at_most_3_live() -> dict[str, Any] | None:
        nonlocal most
        live = live_step_pods(cluster, ns, run)
        assert len(live) <= 3, f"{len(live)} instance pods at once: {live}"
        most = max(most, len(live))
        found = get(cluster, "workflowruns.towline.dev", run, ns)
        ended = found is not None and (found.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Cancelled")
        return found if ended else None

    done = wait_for("the loop to end, sampling its pods", ended_with_at_most_3_live, timeout=600)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert most >= 2, f"instances overlapped (at most {most} seen at once)"
    loop = step_status(done, "deploy")
    assert loop["output"] == [{"deployed": f"{cluster}#{n}"} for n, cluster in enumerate(CLUSTERS)]
    jobs = {job["metadata"]["name"] for job in list_objects(cluster, "jobs", ns, f"towline.dev/run={run}")}
    assert len(jobs) == 20 and all(len(name) <= 63 for name in jobs)
    assert step_status(done, "deploy[7]")["phase"] == "Succeeded"


def test_a_failed_instance_with_fail_fast_cancels_the_rest(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        slow = api.script("/deploy/slow", (200, {}, {}), delay_seconds=120)
        api.script("/deploy/bad", (400, {"error": "no such cluster"}, {}))
        later = [api.script(f"/deploy/{name}", (200, {}, {})) for name in ("c", "d", "e")]
        apply(cluster, loop_workflow(ns, "failfast", {
            "id": "deploy", "action": "http.request", "retry": {"limit": 0}, "timeoutSeconds": 300,
            "forEach": {"items": ["slow", "bad", "c", "d", "e"], "maxParallel": 2, "failFast": True},
            "with": {"url": f"{api.url}/deploy/${{{{ item }}}}", "timeoutSeconds": 240},
        }))
        run = start_run(cluster, ns, "failfast")
        wait_for("the slow instance to call", lambda: slow.requests)
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed", "Cancelled"}, timeout=120)
        assert done["status"]["phase"] == "Failed"
        loop = step_status(done, "deploy")
        assert (loop["phase"], loop["reason"]) == ("Failed", "InstanceFailed")
        assert loop["message"].startswith("instance deploy[1] failed")
        assert step_status(done, "deploy[0]")["phase"] == "Cancelled"  # it was running: stopped
        for index in (2, 3, 4):
            assert (step_status(done, f"deploy[{index}]")["phase"], step_status(done, f"deploy[{index}]")["reason"]) \
                == ("Cancelled", "FailFast")
        assert not any(script.requests for script in later), "an instance after the failure started"
        slow_job = step_status(done, "deploy[0]")["jobName"]
        wait_for("the running instance's Job to be deleted",
                 lambda: slow_job not in {j["metadata"]["name"] for j in list_objects(cluster, "jobs", ns)})


def test_a_gate_in_a_loop_of_3_makes_3_approvals_each_checked_for_approver_and_four_eyes(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, loop_workflow(ns, "gated", {
        "id": "review", "forEach": {"items": ["eu", "us", "ap"], "maxParallel": 3},
        "approval": {"message": "Deploy to ${{ item }}?", "approvers": {"users": ["bob", "carol"]},
                     "fourEyes": True, "expiresAfter": "10m"},
    }))
    run = start_run(cluster, ns, "gated")  # carol asks

    def three_approvals() -> list[dict[str, Any]] | None:
        found = list_objects(cluster, "approvals.towline.dev", ns, f"towline.dev/run={run}")
        return found if len(found) == 3 else None

    approvals = wait_for("one Approval per instance", three_approvals)
    assert sorted(a["spec"]["step"] for a in approvals) == ["review[0]", "review[1]", "review[2]"]
    assert sorted(a["spec"]["message"] for a in approvals) == ["Deploy to ap?", "Deploy to eu?", "Deploy to us?"]
    for approval in approvals:
        name = approval["metadata"]["name"]
        alice = decide(cluster, ns, name, "alice")
        assert alice.returncode != 0 and "not an allowed approver" in alice.stderr, alice.stderr
        carol = decide(cluster, ns, name, "carol")
        assert carol.returncode != 0 and "four-eyes" in carol.stderr, carol.stderr
        bob = decide(cluster, ns, name, "bob")
        assert bob.returncode == 0, bob.stderr
    done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed", "Cancelled"})
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert [step_status(done, f"review[{n}]")["decidedBy"] for n in range(3)] == ["bob"] * 3
