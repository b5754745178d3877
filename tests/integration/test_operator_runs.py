"""The operator end to end on the local control plane and node, running as its own ServiceAccount.

Steps run the real runner image as containers on the real node, against a real
HTTP server on a test host (support.ScriptedServer); approvals are decided with
`kubectl patch` as alice, bob and carol, and the chart's admission policy
decides who may.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.support import (
    ScriptedServer,
    apply,
    awaiting_approval,
    decide,
    get,
    list_objects,
    start_run,
    step_status,
    wait_for,
    wait_for_phase,
)
from tests.integration.workflows import release_workflow

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]


def test_release_with_branch_retry_and_approval_by_bob_succeeds(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/status", (503, {"error": "warming up"}, {}), (200, {"version": "1.4.2"}, {}))
        releases = api.script("/release", (201, {"released": True}, {}))
        apply(cluster, release_workflow(ns, api.url))
        run = start_run(cluster, ns, "release")
        approval = awaiting_approval(cluster, ns, run)

        refused_alice = decide(cluster, ns, approval, "alice")
        assert refused_alice.returncode != 0
        assert "not an allowed approver" in refused_alice.stderr
        refused_requester = decide(cluster, ns, approval, "carol")
        assert refused_requester.returncode != 0
        assert "four-eyes" in refused_requester.stderr
        forged = cluster.kubectl("patch", "approval", approval, "-n", ns, "--type", "merge", "-p",
                                 json.dumps({"spec": {"decision": "Approved", "decidedBy": "carol"}}),
                                 user="bob", check=False)
        assert forged.returncode != 0 and "your own username" in forged.stderr
        accepted = decide(cluster, ns, approval, "bob")
        assert accepted.returncode == 0, accepted.stderr

        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"]
        check = step_status(done, "check")
        assert check["attempt"] == 2, "the 503 was retried once"
        assert check["history"][0]["errorClass"] in {"transient", "rate_limit"}
        assert step_status(done, "page_oncall")["phase"] == "Skipped"
        assert step_status(done, "review")["decidedBy"] == "bob"
        approval_object = get(cluster, "approvals.towline.dev", approval, ns)
        assert approval_object is not None and approval_object["spec"]["decidedBy"] == "bob"
        assert approval_object["status"]["phase"] == "Approved"
        assert approval_object["status"]["decidedAt"], "when bob decided, as the API server recorded it"
        assert len(releases.requests) == 1
        assert json.loads(releases.requests[0]["body"]) == {"version": "1.4.2"}
        assert releases.requests[0]["headers"].get("Idempotency-Key", "").startswith("tl-")


def test_rejected_approval_fails_the_run_with_the_reason(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/status", (200, {"version": "9.9.9"}, {}))
        releases = api.script("/release", (201, {}, {}))
        apply(cluster, release_workflow(ns, api.url))
        run = start_run(cluster, ns, "release")
        approval = awaiting_approval(cluster, ns, run)
        assert decide(cluster, ns, approval, "bob", "Rejected", reason="not during the freeze").returncode == 0
        done = wait_for_phase(cluster, ns, run, {"Failed", "Succeeded"})
        assert done["status"]["phase"] == "Failed"
        review = step_status(done, "review")
        assert "bob" in (review.get("message") or "") and "freeze" in (review.get("message") or "")
        assert step_status(done, "release")["phase"] in {"Skipped", "Cancelled"}
        assert releases.requests == []


def test_expired_approval_fails_the_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/status", (200, {"version": "1.0.0"}, {}))
        apply(cluster, release_workflow(ns, api.url, approval={"expiresAfter": "3s"}))
        run = start_run(cluster, ns, "release")
        approval = awaiting_approval(cluster, ns, run)
        done = wait_for_phase(cluster, ns, run, {"Failed", "Succeeded"}, timeout=60)
        assert done["status"]["phase"] == "Failed"
        assert "expire" in (step_status(done, "review").get("message") or "").lower()
        expired = wait_for("the Approval marked Expired", lambda: (
            (get(cluster, "approvals.towline.dev", approval, ns) or {}).get("status", {}).get("phase") == "Expired"))
        assert expired
        late = decide(cluster, ns, approval, "bob")
        assert late.returncode != 0, "an expired approval can no longer be decided"


def test_cancel_stops_the_running_job(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        slow = api.script("/slow", (200, {}, {}), delay_seconds=30)
        apply(cluster, {
            "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "slow", "namespace": ns},
            "spec": {"steps": [{"id": "crawl", "action": "http.request", "timeoutSeconds": 300,
                                "with": {"url": f"{api.url}/slow", "timeoutSeconds": 240}}]},
        })
        run = start_run(cluster, ns, "slow")
        wait_for("the step to call the slow endpoint", lambda: slow.requests)
        cluster.kubectl("patch", "workflowrun", run, "-n", ns, "--type", "merge", "-p",
                        '{"spec":{"cancel":true}}', user="carol")
        done = wait_for_phase(cluster, ns, run, {"Cancelled", "Failed", "Succeeded"}, timeout=25)
        assert done["status"]["phase"] == "Cancelled"
        assert step_status(done, "crawl")["phase"] == "Cancelled"
        wait_for("the Job to be deleted", lambda: not list_objects(cluster, "jobs", ns, f"towline.dev/run={run}"),
                 timeout=25)


def test_step_pods_are_admitted_under_restricted_pod_security(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    apply(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "pure", "namespace": ns},
        "spec": {"steps": [{"id": "shape", "action": "data.transform",
                            "with": {"data": {"n": 2}, "fields": {"double": "data.n * 2"}}}]},
    })
    run = start_run(cluster, ns, "pure")
    done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert step_status(done, "shape")["output"] == {"double": 4}
    pods = list_objects(cluster, "pods", ns, f"towline.dev/run={run}")
    assert pods, "the pod was admitted and ran"
    spec = pods[0]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_missing_secret_pauses_the_run_and_a_resume_after_repair_completes_it(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        calls = api.script("/ok", (200, {"ok": True}, {}))
        apply(cluster, {
            "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "needs-secret", "namespace": ns},
            "spec": {"steps": [{"id": "call", "action": "http.request", "credentials": {"api": "api-token"},
                                "with": {"url": f"{api.url}/ok",
                                         "auth": {"bearer": {"credential": "api", "key": "token"}}}}]},
        })
        run = start_run(cluster, ns, "needs-secret")

        def paused() -> dict[str, Any] | None:
            found = get(cluster, "workflowruns.towline.dev", run, ns) or {}
            conditions = (found.get("status") or {}).get("conditions", [])
            repair = any(c["type"] == "CredentialsNeedRepair" and c["status"] == "True" for c in conditions)
            return found if repair else None

        found = wait_for("the run to pause for credential repair", paused)
        call = step_status(found, "call")
        assert call["errorClass"] == "auth" and "api-token" in (call.get("message") or "")
        wait_for("the stuck attempt's Job to be deleted",
                 lambda: not list_objects(cluster, "jobs", ns, f"towline.dev/run={run}"))

        cluster.kubectl("create", "secret", "generic", "api-token", "-n", ns, "--from-literal=token=repaired")
        cluster.kubectl("annotate", "workflowrun", run, "-n", ns, "towline.dev/resume=1", user="carol")
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert step_status(done, "call")["attempt"] == 2
        assert [r["headers"]["Authorization"] for r in calls.requests] == ["Bearer repaired"]
