"""GitOps: tracking labels never spread, lastRun is current, Argo CD's health checks on real objects.

The Workflow carries Argo CD's and Flux's real tracking label and annotation
names, as a synced manifest would; the scheduled run the operator creates, its
Jobs, pods, policies and Approval must carry none of them (else Argo CD or
Flux would adopt, and prune, what the operator made).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.gitops_health import argocd_health
from tests.integration.metricsupport import scrape, value
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

from towline_connectors.wire import parse_rfc3339
from towline_dev.controlplane import ControlPlane
from towline_dev.fakeclock import MovableClock
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

TRACKING_LABELS = {"app.kubernetes.io/instance": "towline-examples",
                   "kustomize.toolkit.fluxcd.io/name": "towline-examples",
                   "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}
TRACKING_ANNOTATIONS = {"argocd.argoproj.io/tracking-id": "towline-examples:towline.dev/Workflow:team/nightly"}
HTTP = {"action": "http.request"}


def synced_workflow(namespace: str, api: str, name: str = "nightly", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(TRACKING_LABELS),
                     "annotations": dict(TRACKING_ANNOTATIONS)},
        "spec": {
            "steps": [
                {"id": "check", **HTTP, "with": {"url": f"{api}/check"}, "retry": {"limit": 0}},
                {"id": "review", "needs": ["check"], "approval": {"approvers": {"users": ["bob"]}}},
                {"id": "done", "needs": ["review"], **HTTP, "with": {"url": f"{api}/done"}},
            ],
            **spec,
        },
    }


def tracking_keys(obj: dict[str, Any]) -> set[str]:
    meta = obj["metadata"]
    keys = set(meta.get("labels") or {}) | set(meta.get("annotations") or {})
    return keys & (set(TRACKING_LABELS) | set(TRACKING_ANNOTATIONS))


def test_scheduled_run_and_its_children_never_copy_tracking_metadata_and_lastrun_is_current(
    clocked_operator: tuple[OperatorProcess, MovableClock], towline_installed: ControlPlane, team_namespace: str
) -> None:
    (operator, clock), cluster, ns = clocked_operator, towline_installed, team_namespace
    before = scrape(operator)
    with ScriptedServer() as api:
        api.script("/check", (200, {"ok": True}, {}))
        api.script("/done", (200, {"ok": True}, {}))
        apply(cluster, synced_workflow(ns, api.url, triggers=[
            {"name": "minutely", "schedule": {"cron": "* * * * *", "concurrencyPolicy": "Forbid"}}]))
        ready = wait_for("the Workflow Ready", lambda: (
            (w := get(cluster, "workflows.towline.dev", "nightly", ns)) and w.get("status", {}).get("conditions")
            and w))
        assert argocd_health("Workflow", ready)["status"] == "Healthy"
        # The first slot after the workflow appeared: the operator's clock is moved past it, not waited for.
        clock.advance_past(parse_rfc3339(ready["status"]["nextScheduleTime"]))
        scheduled = wait_for("the scheduled run", lambda: list_objects(
            cluster, "workflowruns.towline.dev", ns, "towline.dev/workflow=nightly"))
        run = scheduled[0]["metadata"]["name"]
        waiting = wait_for_phase(cluster, ns, run, {"AwaitingApproval"})
        assert argocd_health("WorkflowRun", waiting)["status"] == "Suspended"
        approval_name = step_status(waiting, "review")["approvalName"]
        approval = wait_for("the Approval", lambda: get(cluster, "approvals.towline.dev", approval_name, ns))
        assert argocd_health("Approval", approval)["status"] == "Suspended"
        assert decide(cluster, ns, approval_name, "bob").returncode == 0
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert argocd_health("WorkflowRun", done)["status"] == "Healthy"
        decided = get(cluster, "approvals.towline.dev", approval_name, ns)
        assert argocd_health("Approval", decided) == {"status": "Healthy", "message": "Approved by bob"}

        # lastRun names the finished run with its final phase, without waiting for another event.
        current = wait_for("lastRun to show the finished run", lambda: (
            (w := get(cluster, "workflows.towline.dev", "nightly", ns))
            and (w["status"].get("lastRun") or {}).get("phase") == "Succeeded" and w), timeout=20)
        assert current["status"]["lastRun"]["name"] in {r["metadata"]["name"] for r in list_objects(
            cluster, "workflowruns.towline.dev", ns, "towline.dev/workflow=nightly")}

        children = [done, decided]
        for kind in ("jobs", "pods", "networkpolicies"):
            children += list_objects(cluster, kind, ns, f"towline.dev/run={run}")
        assert {c["kind"] for c in children} >= {"WorkflowRun", "Approval", "Job", "Pod", "NetworkPolicy"}
        for child in children:
            assert not tracking_keys(child), (child["kind"], child["metadata"]["name"], tracking_keys(child))
        workflow = get(cluster, "workflows.towline.dev", "nightly", ns)
        assert tracking_keys(workflow) == set(TRACKING_LABELS) | set(TRACKING_ANNOTATIONS), \
            "the operator never touches the synced Workflow's own metadata"

    after = scrape(operator)
    fired = len(list_objects(cluster, "workflowruns.towline.dev", ns, "towline.dev/workflow=nightly"))
    lag = (value(after, "towline_schedule_lag_seconds_count", namespace=ns, workflow="nightly")
           - value(before, "towline_schedule_lag_seconds_count", namespace=ns, workflow="nightly"))
    assert lag == fired >= 1
    assert value(after, "towline_runs_started_total", namespace=ns, workflow="nightly", trigger="schedule") >= 1


def test_argocd_health_of_an_invalid_workflow_and_a_failed_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/check", (400, {"error": "bad request"}, {}))
        broken = synced_workflow(ns, api.url, name="broken")
        broken["spec"]["steps"][0]["needs"] = ["done"]
        apply(cluster, broken)
        invalid = wait_for("the Workflow's Ready=False", lambda: (
            (w := get(cluster, "workflows.towline.dev", "broken", ns))
            and any(c["type"] == "Ready" and c["status"] == "False" for c in w.get("status", {}).get("conditions", []))
            and w))
        verdict = argocd_health("Workflow", invalid)
        assert verdict["status"] == "Degraded" and "cycle" in verdict["message"].lower(), verdict

        apply(cluster, synced_workflow(ns, api.url, name="failing"))
        run = start_run(cluster, ns, "failing")
        failed = wait_for_phase(cluster, ns, run, {"Failed", "Succeeded"})
        assert failed["status"]["phase"] == "Failed"
        assert argocd_health("WorkflowRun", failed) == {"status": "Degraded", "message": failed["status"]["message"]}
