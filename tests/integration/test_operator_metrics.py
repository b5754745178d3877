"""The operator's /metrics after an end-to-end run: values, histogram buckets and label cardinality.

The session's operator serves /metrics on a loopback port; the test scrapes it
before and after one run (a transient failure retried, an approval decided by
bob) and checks the differences, since other tests share the operator.
"""

from __future__ import annotations

import json
import platform
from datetime import datetime
from importlib.metadata import version
from typing import Any

import pytest
from tests.integration.metricsupport import Samples, scrape, value
from tests.integration.support import (
    ScriptedServer,
    apply,
    decide,
    get,
    start_run,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

ALLOWED_LABELS = {"namespace", "workflow", "trigger", "outcome", "action", "error_class", "decision",
                  "verb", "resource", "code", "le",
                  "name",  # the work queue's own name: runs or workflows
                  "source",  # how a reconcile saw a run's children: hit or listed
                  "shard",  # a shard's index, below operator.shards (at most 64)
                  "phase", "version", "python_version", "image"}



def seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def workflow(namespace: str, api: str) -> dict[str, Any]:
    http = {"action": "http.request"}
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "metered", "namespace": namespace},
        "spec": {"steps": [
            {"id": "check", **http, "with": {"url": f"{api}/check"},
             "retry": {"limit": 2, "backoff": "fixed", "baseDelaySeconds": 1}},
            {"id": "review", "needs": ["check"], "approval": {"approvers": {"users": ["bob"]}}},
            {"id": "report", "needs": ["review"], **http, "with": {"url": f"{api}/report"}},
        ]},
    }


def test_metrics_after_an_end_to_end_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    before = scrape(towline_operator)
    with ScriptedServer() as api:
        api.script("/check", (503, {"error": "warming up"}, {}), (200, {"ok": True}, {}))
        api.script("/report", (200, {"ok": True}, {}))
        apply(cluster, workflow(ns, api.url))
        run = start_run(cluster, ns, "metered")
        waiting = wait_for_phase(cluster, ns, run, {"AwaitingApproval"})
        approval = step_status(waiting, "review")["approvalName"]
        wait_for("the Approval", lambda: get(cluster, "approvals.towline.dev", approval, ns))
        wait_for("approvals_pending 1", lambda: value(scrape(towline_operator), "towline_approvals_pending",
                                                        namespace=ns) == 1)
        waiting_now = scrape(towline_operator)
        assert value(waiting_now, "towline_runs", namespace=ns, workflow="metered", phase="AwaitingApproval") == 1
        # The gate's own expiry (expiresAfter, 72 h by default), exactly as its status says.
        expires = step_status(waiting, "review")["expiresAt"]
        assert value(waiting_now, "towline_approval_next_expiry_timestamp_seconds", namespace=ns) == seconds(expires)
        assert decide(cluster, ns, approval, "bob").returncode == 0
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"]
    after = scrape(towline_operator)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("towline_runs_started_total", namespace=ns, workflow="metered", trigger="manual") == 1
    assert delta("towline_runs_finished_total", namespace=ns, workflow="metered", outcome="Succeeded") == 1
    assert delta("towline_runs_finished_total", namespace=ns, workflow="metered", outcome="Failed") == 0
    assert delta("towline_step_retries_total", error_class="transient") == 1
    # check failed once and succeeded once, report succeeded: three attempts of http.request.
    assert delta("towline_step_duration_seconds_count", action="http.request", outcome="Failed") == 1
    assert delta("towline_step_duration_seconds_count", action="http.request", outcome="Succeeded") == 2
    # The run's attempts landed in the buckets: cumulative, ending at +Inf with all of them.
    bounds = ["0.5", "1.0", "2.5", "5.0", "10.0", "30.0", "60.0", "300.0", "900.0", "3600.0", "+Inf"]
    for outcome, count in (("Failed", 1), ("Succeeded", 2)):
        buckets = [delta("towline_step_duration_seconds_bucket", action="http.request", outcome=outcome, le=le)
                   for le in bounds]
        assert buckets == sorted(buckets) and buckets[-1] == count, buckets
        assert delta("towline_step_duration_seconds_sum", action="http.request", outcome=outcome) >= 0
    assert delta("towline_approval_decision_seconds_count", decision="Approved") == 1
    assert delta("towline_approval_decision_seconds_bucket", decision="Approved", le="604800.0") == 1
    assert value(after, "towline_approvals_pending", namespace=ns) == 0
    assert ("towline_approval_next_expiry_timestamp_seconds", (("namespace", ns),)) not in after
    # Run duration: one observation, the run's own startedAt to finishedAt.
    status = done["status"]
    assert delta("towline_run_duration_seconds_count", namespace=ns, workflow="metered", outcome="Succeeded") == 1
    took = delta("towline_run_duration_seconds_sum", namespace=ns, workflow="metered", outcome="Succeeded")
    assert abs(took - (seconds(status["finishedAt"]) - seconds(status["startedAt"]))) < 0.01, (took, status)
    # Runs by phase from the watch cache: the finished run counts as Succeeded, nowhere else.
    def succeeded_shown() -> Samples | None:
        now = scrape(towline_operator)
        return now if value(now, "towline_runs", namespace=ns, workflow="metered", phase="Succeeded") == 1 else None

    final: Samples = wait_for("towline_runs to show the run Succeeded", succeeded_shown)
    assert [labels for (name, labels) in final if name == "towline_runs" and dict(labels)["namespace"] == ns] == [
        (("namespace", ns), ("phase", "Succeeded"), ("workflow", "metered"))]
    # The session's single operator holds the Lease; its build is this checkout's installed package.
    assert value(final, "towline_leader") == 1
    (build,) = [dict(labels) for (name, labels) in final if name == "towline_build_info"]
    # No image outside a pod (the chart sets TOWLINE_IMAGE: test_chart.py).
    assert build == {"version": version("towline"), "python_version": platform.python_version(), "image": ""}
    assert value(final, "towline_build_info", **build) == 1

    # Cardinality: only bounded label names, never a run, step, Job, Approval or user name as a value.
    towline_samples = [(name, dict(labels)) for (name, labels) in after if name.startswith("towline_")]
    assert towline_samples
    forbidden_values = {run, approval, "check", "review", "report", "bob", "carol", done["metadata"]["uid"]}
    forbidden_values.update(s["jobName"] for s in done["status"]["steps"] if s.get("jobName"))
    for name, labels in towline_samples:
        assert set(labels) <= ALLOWED_LABELS, (name, labels)
        assert labels.get("name", "runs") in {"runs", "workflows", "steptypes"}, (name, labels)
        assert labels.get("shard", "0") == "0", "the session's operator runs one shard"
        assert labels.get("source", "hit") in {"hit", "listed"}, (name, labels)
        assert not forbidden_values & set(labels.values()), (name, labels)
    series_per_family: dict[str, int] = {}
    for name, _ in towline_samples:
        series_per_family[name] = series_per_family.get(name, 0) + 1
    assert max(series_per_family.values()) < 500, series_per_family


def test_operator_json_log_lines_carry_the_run_step_and_attempt(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/check", (503, {"error": "warming up"}, {}), (200, {"ok": True}, {}))
        apply(cluster, {**workflow(ns, api.url), "spec": {"steps": workflow(ns, api.url)["spec"]["steps"][:1]}})
        run = start_run(cluster, ns, "metered", name="logged")
        assert wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
    lines = [json.loads(line) for line in towline_operator.log_text().splitlines() if line.startswith("{")]
    mine = [line for line in lines if line.get("run") == run]
    created = {(line.get("step"), line.get("attempt")) for line in mine if line["message"].startswith("created Job")}
    assert created == {("check", "1"), ("check", "2")}, mine
    assert all(line["namespace"] == ns for line in mine)
