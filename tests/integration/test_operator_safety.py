"""Restart safety, secrecy and GitOps hygiene of the operator on the local control plane."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from tests.integration.support import (
    ScriptedServer,
    apply,
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

CANARY = "canary-7f3e9c1d5b2a-do-not-leak"


def test_workflow_metadata_and_spec_are_exactly_what_the_user_applied(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    manifest = {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "synced", "namespace": ns, "labels": {"team": "ops"},
                     "annotations": {"argocd.argoproj.io/tracking-id": "ops:towline.dev/Workflow:ns/synced"}},
        "spec": {"triggers": [{"name": "hourly", "schedule": {"cron": "0 * * * *"}}],
                 "steps": [{"id": "shape", "action": "data.transform",
                            "with": {"data": {}, "fields": {"ok": "true"}}}]},
    }
    cluster.kubectl("apply", "--server-side", "--field-manager=gitops", "-f", "-", stdin=json.dumps(manifest))
    before = get(cluster, "workflows.towline.dev", "synced", ns)
    assert before is not None

    def ready() -> dict[str, Any] | None:
        found = get(cluster, "workflows.towline.dev", "synced", ns) or {}
        conditions = (found.get("status") or {}).get("conditions", [])
        return found if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None

    after = wait_for("the Workflow to be Ready", ready)
    assert after["status"]["observedGeneration"] == after["metadata"]["generation"]
    assert after["status"].get("nextScheduleTime")
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert after["metadata"].get("labels") == before["metadata"].get("labels")
    assert after["spec"] == before["spec"]
    assert after["metadata"].get("finalizers") is None
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


def test_canary_secret_value_appears_nowhere_but_its_secret(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    cluster.kubectl("create", "secret", "generic", "canary-api", "-n", ns, f"--from-literal=token={CANARY}")
    with ScriptedServer() as api:
        # The provider echoes the secret back, in an error and in the answer the step returns and the Workflow's
        # outputs read: the runner must still not leak it, into the step's output or the run's outputs.
        calls = api.script("/whoami", (500, {"error": f"bad token {CANARY}"}, {}),
                           (200, {"me": "ok", "token": CANARY}, {}))
        apply(cluster, {
            "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "uses-secret", "namespace": ns},
            "spec": {"steps": [{
                "id": "call", "action": "http.request", "credentials": {"api": "canary-api"},
                "with": {"url": f"{api.url}/whoami", "auth": {"bearer": {"credential": "api", "key": "token"}}},
                "retry": {"limit": 1, "backoff": "fixed", "baseDelaySeconds": 1},
                }], "outputs": {"answer": "steps.call.output.body"}},
        })
        start_run(cluster, ns, "uses-secret", "canary-run")
        done = wait_for_phase(cluster, ns, "canary-run", {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert calls.requests[0]["headers"]["Authorization"] == f"Bearer {CANARY}", "the step really used it"
    assert step_status(done, "call")["credentialsUsed"] == ["canary-api"]
    assert done["status"]["outputs"]["answer"]["me"] == "ok", done["status"].get("outputs")

    kinds = cluster.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    leaks = []
    for kind in kinds:
        listed = cluster.kubectl("get", kind, "--all-namespaces", "-o", "json", check=False)
        if listed.returncode != 0:
            continue
        for item in json.loads(listed.stdout).get("items", []):
            if CANARY in json.dumps(item):
                meta = item.get("metadata", {})
                if not (kind == "secrets" and meta.get("name") == "canary-api"):
                    leaks.append(f"{kind}/{meta.get('namespace')}/{meta.get('name')}")
    assert leaks == [], f"the canary leaked into {leaks}"
    assert CANARY not in towline_operator.log_text()
    pods = list_objects(cluster, "pods", ns, "towline.dev/run=canary-run")
    assert len(pods) == 2, "both attempts' containers are there to read"
    for pod in pods:
        logs = cluster.kubectl("logs", pod["metadata"]["name"], "-n", ns, "--all-containers").stdout
        assert "running http.request" in logs, "the container's own output, from the kubelet"
        assert CANARY not in logs, f"the canary leaked into the logs of {pod['metadata']['name']}"


def test_operator_killed_at_several_points_completes_the_run_without_a_second_job(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    jobs_seen: dict[str, set[str]] = {}
    stop = threading.Event()

    def record_jobs() -> None:
        while not stop.is_set():
            for job in list_objects(cluster, "jobs", ns, "towline.dev/run=crash-run"):
                jobs_seen.setdefault(job["metadata"]["name"], set()).add(job["metadata"]["uid"])
            time.sleep(0.2)

    watcher = threading.Thread(target=record_jobs, daemon=True)
    watcher.start()
    with ScriptedServer() as api:
        api.script("/a", (503, {}, {}), (200, {"n": 1}, {}))
        api.script("/b", (200, {"n": 2}, {}), delay_seconds=2)
        api.script("/c", (200, {"n": 3}, {}))
        steps = [
            {"id": "a", "action": "http.request", "with": {"url": f"{api.url}/a", "select": "response.body"},
             "retry": {"limit": 2, "backoff": "fixed", "baseDelaySeconds": 2}},
            {"id": "b", "needs": ["a"], "action": "http.request",
             "with": {"url": f"{api.url}/b", "method": "POST", "json": {"n": "${{ steps.a.output.n }}"}}},
            {"id": "c", "needs": ["b"], "action": "http.request", "with": {"url": f"{api.url}/c"}},
        ]
        apply(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                        "metadata": {"name": "crashy", "namespace": ns}, "spec": {"steps": steps}})
        start_run(cluster, ns, "crashy", "crash-run")
        # Kill right after the first Job appears, while a retry is scheduled, and while b runs.
        for moment in ("a's first Job", "a's retry", "b's Job"):
            # Each moment waits on a step pod's start and end; under the suite's three workers a pod alone has
            # taken over 50 s from Job to end, hence the long limit (a fact is waited for, not a time).
            wait_for(moment, lambda m=moment: _reached(cluster, ns, m), timeout=240, interval=0.1)
            towline_operator.kill()
            time.sleep(1)  # down for a moment, as a crash-looping pod is; the run must not move meanwhile
            towline_operator.start()
        done = wait_for_phase(cluster, ns, "crash-run", {"Succeeded", "Failed"})
    stop.set()
    watcher.join(timeout=5)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert all(len(uids) == 1 for uids in jobs_seen.values()), f"a Job was created twice: {jobs_seen}"
    attempts = {(s["id"], s["attempt"]) for s in done["status"]["steps"]}
    assert attempts == {("a", 2), ("b", 1), ("c", 1)}
    assert len(jobs_seen) == 4, f"exactly one Job per attempt: {sorted(jobs_seen)}"


def _reached(cluster: ControlPlane, namespace: str, moment: str) -> bool:
    jobs = {j["metadata"]["annotations"]["towline.dev/step-id"] + "/" + j["metadata"]["labels"]["towline.dev/attempt"]
            for j in list_objects(cluster, "jobs", namespace, "towline.dev/run=crash-run")}
    if moment == "a's first Job":
        return "a/1" in jobs
    if moment == "a's retry":
        run = get(cluster, "workflowruns.towline.dev", "crash-run", namespace) or {}
        return (run.get("status") or {}).get("phase") == "RetryScheduled" or "a/2" in jobs
    return "b/1" in jobs


def test_schedule_every_minute_fires_once_per_slot_across_a_restart(
    clocked_operator: tuple[OperatorProcess, MovableClock], towline_installed: ControlPlane, team_namespace: str
) -> None:
    (operator, clock), cluster, ns = clocked_operator, towline_installed, team_namespace
    apply(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "minutely", "namespace": ns},
        "spec": {"triggers": [{"name": "tick", "schedule": {"cron": "* * * * *"}}],
                 "steps": [{"id": "noop", "action": "data.transform",
                            "with": {"data": {}, "fields": {"ok": "true"}}}],
                 "policy": {"history": {"succeeded": 20, "failed": 20}}},
    })

    def scheduled_runs() -> list[dict[str, Any]]:
        return [r for r in list_objects(cluster, "workflowruns.towline.dev", ns)
                if r["spec"].get("trigger", {}).get("type") == "schedule"]

    def run_of(slot: datetime) -> list[dict[str, Any]]:
        return [r for r in scheduled_runs() if _slot(r) == slot]

    # The first slot is the minute after the workflow appeared; the operator's clock (moved by the
    # test, not waited for) then passes it, and each later slot, one by one.
    next_slot = wait_for("the schedule's next slot", lambda: (
        (get(cluster, "workflows.towline.dev", "minutely", ns) or {}).get("status") or {}).get("nextScheduleTime"))
    first_slot = parse_rfc3339(next_slot)
    assert first_slot.second == 0, f"a slot is at the start of a minute: {first_slot}"
    clock.advance_past(first_slot)
    wait_for("the first scheduled run", lambda: run_of(first_slot))
    # The operator is down while its clock passes the next slot: once back, it fires that slot once.
    operator.kill()
    clock.advance_past(first_slot + timedelta(minutes=1))
    operator.start()
    wait_for("the slot missed while down", lambda: run_of(first_slot + timedelta(minutes=1)))
    clock.advance_past(first_slot + timedelta(minutes=2))
    wait_for("the slot after the restart", lambda: run_of(first_slot + timedelta(minutes=2)))
    slots = sorted(_slot(r) for r in scheduled_runs())
    assert len(slots) == len(set(slots)), f"a slot fired twice: {slots}"
    # Real time passes too (the test's clock only adds to it): a minute boundary crossed before the test
    # read nextScheduleTime fires a slot before `first_slot`. Whatever fired, it is every minute once,
    # from the first minute after the Workflow appeared.
    minutes = [(s - slots[0]).total_seconds() / 60 for s in slots]
    assert minutes == list(range(len(minutes))), f"every minute fired exactly once: {minutes}"
    assert {first_slot + timedelta(minutes=n) for n in range(3)} <= set(slots), slots
    workflow = get(cluster, "workflows.towline.dev", "minutely", ns) or {}
    created = parse_rfc3339(workflow["metadata"]["creationTimestamp"])
    assert created < slots[0] <= created + timedelta(minutes=1), f"the first slot follows the creation: {created}"


def _slot(run: dict[str, Any]) -> datetime:
    return parse_rfc3339(run["spec"]["trigger"]["scheduledTime"])


def test_history_limit_keeps_the_newest_finished_runs_and_their_jobs_go_with_the_rest(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "short-memory", "namespace": ns},
        "spec": {"steps": [{"id": "noop", "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}}],
                 "policy": {"history": {"succeeded": 1, "failed": 1}}},
    })
    for index in range(3):
        start_run(cluster, ns, "short-memory", f"mem-{index}")
        wait_for_phase(cluster, ns, f"mem-{index}", {"Succeeded"})
    remaining = wait_for("older runs to be deleted", lambda: (
        names if (names := sorted(r["metadata"]["name"] for r in list_objects(cluster, "workflowruns.towline.dev", ns)))
        == ["mem-2"] else None))
    assert remaining == ["mem-2"]
    wait_for("the deleted runs' Jobs to be garbage-collected", lambda: sorted(
        j["metadata"]["labels"]["towline.dev/run"] for j in list_objects(cluster, "jobs", ns)) == ["mem-2"])
