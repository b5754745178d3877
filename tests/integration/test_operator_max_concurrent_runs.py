"""policy.maxConcurrentRuns end to end: runs over the limit wait Pending, with no Job, and start oldest first.

The real operator, API server and node: each run passes an approval gate (so a
run holds its slot until bob decides) and then runs a real step Job.
"""

from __future__ import annotations

import json
from datetime import datetime
from itertools import pairwise
from typing import Any

import pytest
from tests.integration.support import apply, get, list_objects, start_run, step_status, wait_for, wait_for_phase
from tests.integration.workflows import one_at_a_time

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

RUNS = "workflowruns.towline.dev"



def approve(cluster: ControlPlane, namespace: str, run: str) -> None:
    found = wait_for_phase(cluster, namespace, run, {"AwaitingApproval"})
    approval = step_status(found, "review")["approvalName"]
    wait_for("the Approval object", lambda: get(cluster, "approvals.towline.dev", approval, namespace))
    decided = cluster.kubectl("patch", "approval", approval, "-n", namespace, "--type", "merge", "-p",
                              json.dumps({"spec": {"decision": "Approved", "decidedBy": "bob"}}),
                              user="bob", check=False)
    assert decided.returncode == 0, decided.stderr


def queued(cluster: ControlPlane, namespace: str, run: str) -> dict[str, Any]:
    """The run once the operator has said it waits for a slot."""
    def probe() -> dict[str, Any] | None:
        found = get(cluster, RUNS, run, namespace) or {}
        status = found.get("status") or {}
        waiting = any(c["type"] == "Queued" and c["status"] == "True" for c in status.get("conditions") or [])
        return found if waiting else None

    found: dict[str, Any] = wait_for(f"run {run} to be queued", probe)
    return found


def after_server_second(cluster: ControlPlane, namespace: str, stamp: str) -> None:
    """Wait until the API server's clock is past `stamp` (RFC 3339, whole seconds): a dry-run create shows it."""
    def probe() -> bool:
        made = cluster.kubectl("create", "configmap", "clock-probe", "-n", namespace, "--dry-run=server",
                               "-o", "json")
        return bool(json.loads(made.stdout)["metadata"]["creationTimestamp"] > stamp)

    wait_for(f"the API server's clock to pass {stamp}", probe)


def moment(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def created(cluster: ControlPlane, namespace: str, run: str) -> str:
    found = get(cluster, RUNS, run, namespace)
    assert found is not None
    return str(found["metadata"]["creationTimestamp"])


def jobs_of(cluster: ControlPlane, namespace: str, run: str) -> list[dict[str, Any]]:
    return list_objects(cluster, "jobs", namespace, f"towline.dev/run={run}")


def one_holding_one_queued(cluster: ControlPlane, namespace: str) -> tuple[str, str]:
    """Workflow `deploy` at maxConcurrentRuns 1: a run holding the slot at its approval, a second queued."""
    apply(cluster, one_at_a_time(namespace))
    holder = start_run(cluster, namespace, "deploy", "holder")
    wait_for_phase(cluster, namespace, holder, {"AwaitingApproval"})
    waiting = start_run(cluster, namespace, "deploy", "waiting")
    queued(cluster, namespace, waiting)
    return holder, waiting


def test_runs_over_the_limit_wait_with_no_job_and_start_oldest_first(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, one_at_a_time(ns))
    # Created oldest first, with names sorting the other way: a name must not move a run ahead.
    first = start_run(cluster, ns, "deploy", "run-c")
    wait_for_phase(cluster, ns, first, {"AwaitingApproval"})
    second = start_run(cluster, ns, "deploy", "run-b")
    waiting = queued(cluster, ns, second)
    after_server_second(cluster, ns, created(cluster, ns, second))
    third = start_run(cluster, ns, "deploy", "run-a")
    queued(cluster, ns, third)

    for run in (second, third):
        found = queued(cluster, ns, run)
        status = found["status"]
        assert status["phase"] == "Pending"
        assert status["message"].startswith("queued: 1 run(s) of workflow deploy running"), status["message"]
        assert "policy.maxConcurrentRuns is 1; starts when one finishes" in status["message"]
        assert "workflowSpec" not in status and "startedAt" not in status, "no snapshot before it starts"
        assert jobs_of(cluster, ns, run) == []
    assert "and 1 older run(s) queued" in (get(cluster, RUNS, third, ns) or {})["status"]["message"]
    assert "older run(s) queued" not in waiting["status"]["message"], "nothing was queued ahead of the second run"
    events = list_objects(cluster, "events", ns)
    queued_events = [e for e in events if e.get("reason") == "RunQueued"]
    assert sorted(e["involvedObject"]["name"] for e in queued_events) == sorted([second, third])
    assert all(e.get("count", 1) == 1 for e in queued_events), "one RunQueued Event per run"

    approve(cluster, ns, first)
    done_first = wait_for_phase(cluster, ns, first, {"Succeeded", "Failed"})
    approve(cluster, ns, second)  # the second created starts next, though run-a sorts first by name
    assert (get(cluster, RUNS, third, ns) or {})["status"]["phase"] == "Pending"
    assert jobs_of(cluster, ns, third) == []
    done_second = wait_for_phase(cluster, ns, second, {"Succeeded", "Failed"})
    approve(cluster, ns, third)
    done_third = wait_for_phase(cluster, ns, third, {"Succeeded", "Failed"})

    ordered = [done_first, done_second, done_third]
    assert [run["status"]["phase"] for run in ordered] == ["Succeeded"] * 3
    for earlier, later in pairwise(ordered):
        finished = moment(earlier["status"]["finishedAt"])
        assert moment(later["status"]["startedAt"]) >= finished, "two runs were active at once"
        jobs = jobs_of(cluster, ns, later["metadata"]["name"])
        assert jobs, "the run's step ran as a Job"
        # creationTimestamp has whole seconds: no Job of the later run before the second the earlier one ended.
        assert min(moment(job["metadata"]["creationTimestamp"]) for job in jobs) >= finished.replace(microsecond=0)
        left = next(c for c in later["status"]["conditions"] if c["type"] == "Queued")
        assert (left["status"], left["reason"]) == ("False", "Started")


def test_a_queued_run_that_is_cancelled_ends_without_starting(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    holder, waiting = one_holding_one_queued(cluster, ns)
    cancelled = cluster.kubectl("patch", RUNS, waiting, "-n", ns, "--type", "merge",
                                "-p", json.dumps({"spec": {"cancel": True}}), user="carol", check=False)
    assert cancelled.returncode == 0, cancelled.stderr
    done = wait_for_phase(cluster, ns, waiting, {"Cancelled", "Succeeded", "Failed"})
    assert done["status"]["phase"] == "Cancelled"
    assert "startedAt" not in done["status"] and "workflowSpec" not in done["status"]
    assert jobs_of(cluster, ns, waiting) == []
    approvals = [a["spec"]["runName"] for a in list_objects(cluster, "approvals.towline.dev", ns)]
    assert approvals == [holder], "only the run that started reached its gate"
    assert (get(cluster, RUNS, holder, ns) or {})["status"]["phase"] == "AwaitingApproval"


def test_raising_the_limit_starts_a_queued_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    holder, waiting = one_holding_one_queued(cluster, ns)
    raised = one_at_a_time(ns)
    raised["spec"]["policy"]["maxConcurrentRuns"] = 2
    apply(cluster, raised)
    wait_for_phase(cluster, ns, waiting, {"AwaitingApproval"})
    assert (get(cluster, RUNS, holder, ns) or {})["status"]["phase"] == "AwaitingApproval"
