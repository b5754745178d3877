"""What `kubectl get`, `kubectl wait` and kstatus make of runs and approvals, on the real API server.

Three runs of one gated workflow: one approved (Succeeded), one rejected (Failed), one left at its
gate (in progress). kstatus is sigs.k8s.io/cli-utils' own code (towline_dev.kstatus, the pinned
release), given each run exactly as `kubectl get -o json` returns it: the verdicts tools such as
Flux and kpt would reach. The columns are read from kubectl's table output by the header's offsets.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from tests.integration.support import apply, get, start_run, step_status, wait_for, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.kstatus import compute

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

RUNS = "workflowruns.towline.dev"
APPROVALS = "approvals.towline.dev"
QUESTION = "Ship build 42 to production?"
DURATION = re.compile(r"^(\d+\.\ds|\d+m\d\ds|\d+h\d\dm)$")


def gated(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "ship", "namespace": namespace},
        "spec": {
            "steps": [
                {"id": "review", "approval": {"approvers": {"users": ["bob"], "groups": ["release-managers"]},
                                              "message": QUESTION, "expiresAfter": "10m"}},
                {"id": "apply", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {}, "fields": {"applied": "true"}}},
            ],
        },
    }


def decide(cluster: ControlPlane, namespace: str, run: str, decision: str) -> str:
    found = wait_for_phase(cluster, namespace, run, {"AwaitingApproval"})
    approval = str(step_status(found, "review")["approvalName"])
    wait_for("the Approval object", lambda: get(cluster, APPROVALS, approval, namespace))
    decided = cluster.kubectl("patch", "approval", approval, "-n", namespace, "--type", "merge", "-p",
                              json.dumps({"spec": {"decision": decision, "decidedBy": "bob"}}),
                              user="bob", check=False)
    assert decided.returncode == 0, decided.stderr
    return approval


def table(cluster: ControlPlane, *args: str) -> dict[str, dict[str, str]]:
    """`kubectl get` as {NAME: {HEADER: cell}}, each cell cut at its header's offset (cells may hold spaces)."""
    lines = cluster.kubectl("get", *args).stdout.splitlines()
    header = lines[0]
    starts = [match.start() for match in re.finditer(r"\S+(?: \S+)*", header)]
    names = [header[start:end].strip() for start, end in zip(starts, [*starts[1:], None], strict=True)]
    rows = {}
    for line in lines[1:]:
        cells = [line[start:end].strip() for start, end in zip(starts, [*starts[1:], None], strict=True)]
        rows[cells[0]] = dict(zip(names, cells, strict=True))
    return rows


def settled(cluster: ControlPlane, namespace: str, run: str) -> dict[str, Any]:
    """The run once its status describes its current generation."""
    def probe() -> dict[str, Any] | None:
        found = get(cluster, RUNS, run, namespace) or {}
        status = found.get("status") or {}
        return found if status.get("observedGeneration") == found["metadata"]["generation"] else None

    found: dict[str, Any] = wait_for(f"run {run} to observe its generation", probe)
    return found


def condition(run: dict[str, Any], kind: str) -> tuple[str, str]:
    found = next(c for c in run["status"]["conditions"] if c["type"] == kind)
    return found["status"], found["reason"]


def test_runs_read_as_kstatus_expects_and_the_columns_show_duration_and_approvers(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, gated(ns))
    ok, bad, waiting = (start_run(cluster, ns, "ship", name) for name in ("run-ok", "run-bad", "run-waiting"))
    decide(cluster, ns, ok, "Approved")
    decide(cluster, ns, bad, "Rejected")
    wait_for_phase(cluster, ns, waiting, {"AwaitingApproval"})
    done = wait_for_phase(cluster, ns, ok, {"Succeeded", "Failed"})
    failed = wait_for_phase(cluster, ns, bad, {"Succeeded", "Failed"})
    assert (done["status"]["phase"], failed["status"]["phase"]) == ("Succeeded", "Failed")

    # `kubectl wait` on the documented condition, both ways.
    for run, value in ((ok, "True"), (bad, "False")):
        waited = cluster.kubectl("wait", f"--for=condition=Succeeded={value}", f"workflowrun/{run}", "-n", ns,
                                 "--timeout=60s", check=False)
        assert waited.returncode == 0, waited.stderr
        assert waited.stdout.strip() == f"workflowrun.towline.dev/{run} condition met"

    # kstatus, the real library, on the objects as the API server returns them.
    verdicts = {run: compute(settled(cluster, ns, run)) for run in (ok, bad, waiting)}
    assert verdicts[ok].status == "Current", verdicts[ok]
    assert verdicts[bad].status == "Failed", verdicts[bad]
    assert verdicts[bad].message == failed["status"]["message"]
    assert verdicts[waiting].status == "InProgress", verdicts[waiting]
    waiting_run = settled(cluster, ns, waiting)
    assert condition(waiting_run, "Reconciling") == ("True", "AwaitingApproval")
    assert condition(waiting_run, "Stalled") == ("False", "AwaitingApproval")
    assert condition(settled(cluster, ns, bad), "Stalled") == ("True", "ApprovalRejected")

    # A spec change raises the generation; the operator's next write says it saw it, in flight or finished.
    for run, verdict in ((waiting, "InProgress"), (ok, "Current")):
        before = settled(cluster, ns, run)["metadata"]["generation"]
        change = {"suspend": True} if run == waiting else {"cancel": True}
        patched = cluster.kubectl("patch", "workflowrun", run, "-n", ns, "--type", "merge",
                                  "-p", json.dumps({"spec": change}), user="carol", check=False)
        assert patched.returncode == 0, patched.stderr
        after = settled(cluster, ns, run)
        assert after["metadata"]["generation"] == before + 1
        assert after["status"]["observedGeneration"] == before + 1
        assert compute(after).status == verdict
    assert (get(cluster, RUNS, ok, ns) or {})["status"]["phase"] == "Succeeded", "a late cancel changes no outcome"

    runs = table(cluster, RUNS, "-n", ns)
    assert list(runs[ok]) == ["NAME", "WORKFLOW", "PHASE", "STEP", "STARTED", "DURATION", "AGE"]
    finished = settled(cluster, ns, ok)["status"]
    assert DURATION.match(runs[ok]["DURATION"]) and runs[ok]["DURATION"] == finished["duration"], runs[ok]
    assert runs[bad]["DURATION"] == failed["status"]["duration"]
    assert runs[waiting]["DURATION"] == "", "no figure for a run still in flight"
    assert (runs[waiting]["PHASE"], runs[waiting]["STEP"]) == ("AwaitingApproval", "review")

    approvals = table(cluster, APPROVALS, "-n", ns)
    assert list(next(iter(approvals.values()))) == [
        "NAME", "RUN", "STEP", "APPROVERS", "DECISION", "DECIDED BY", "EXPIRES", "AGE"]
    by_run = {row["RUN"]: row for row in approvals.values()}
    assert sorted(by_run) == sorted([ok, bad, waiting])
    assert {row["APPROVERS"] for row in by_run.values()} == {"bob, group:release-managers"}
    assert (by_run[ok]["DECISION"], by_run[bad]["DECISION"], by_run[waiting]["DECISION"]) == (
        "Approved", "Rejected", "")
    wide = table(cluster, APPROVALS, "-n", ns, "-o", "wide")
    assert {row["MESSAGE"] for row in wide.values()} == {QUESTION}
    assert [name for name in next(iter(wide.values())) if name not in approvals[next(iter(approvals))]] == [
        "PHASE", "WORKFLOW", "REQUESTED BY", "MESSAGE"]
