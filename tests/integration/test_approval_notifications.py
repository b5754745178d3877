"""Approval notifications end to end: a signed webhook to a sink on a test host, once per gate event.

The sink (support.ScriptedServer) counts deliveries by the event each body
names. The operator is SIGKILLed right after the Approval appears and again
while the opened notification is being delivered; a new operator process takes
over each time (or a standby replica takes the Lease: a leader change), and
every event still arrives exactly once, signed with the Secret only the
notification's pod mounts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.replicas import lease_holder, replica_of
from tests.integration.support import (
    Scripted,
    ScriptedServer,
    apply,
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

SIGNING_KEY = b"approval-notifications-signing-key"
SIGNING_SECRET = "whsec_" + base64.b64encode(SIGNING_KEY).decode()
NOTIFICATION_LABEL = "towline.dev/notification"


def notifying_workflow(namespace: str, sink: str, *, expires_after: str = "10m") -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "ship", "namespace": namespace},
        "spec": {
            "steps": [
                {"id": "review", "approval": {"message": "Ship 1.2.3?", "approvers": {"users": ["bob"]},
                                              "expiresAfter": expires_after}},
                {"id": "done", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {}, "fields": {"shipped": "true"}}},
            ],
            "approvalNotifications": [{
                "events": ["opened", "decided", "expired"], "action": "webhook.send",
                "with": {"url": f"{sink}/approvals"}, "credentials": {"webhook": "approvals-hook"},
            }],
        },
    }


def create_signing_secret(cluster: ControlPlane, namespace: str) -> None:
    apply(cluster, {"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "approvals-hook", "namespace": namespace},
                    "stringData": {"signing-secret": SIGNING_SECRET}})


def events(sink: Scripted) -> Counter[str]:
    return Counter(json.loads(request["body"])["event"] for request in list(sink.requests))


def signed(request: dict[str, Any]) -> bool:
    headers = {key.lower(): value for key, value in request["headers"].items()}
    to_sign = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.{request['body']}".encode()
    expected = "v1," + base64.b64encode(hmac.new(SIGNING_KEY, to_sign, hashlib.sha256).digest()).decode()
    return expected in headers["webhook-signature"].split()


def notification_jobs(cluster: ControlPlane, namespace: str, run: str) -> list[dict[str, Any]]:
    return [job for job in list_objects(cluster, "jobs", namespace, f"towline.dev/run={run}")
            if NOTIFICATION_LABEL in job["metadata"].get("labels", {})]


def all_complete(cluster: ControlPlane, namespace: str, run: str, count: int) -> list[dict[str, Any]] | None:
    jobs = notification_jobs(cluster, namespace, run)
    done = [job for job in jobs if any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                                       for c in (job.get("status") or {}).get("conditions") or [])]
    return jobs if len(jobs) >= count and len(done) == len(jobs) else None


def assert_no_secret_anywhere(cluster: ControlPlane, namespace: str, run: str) -> None:
    jobs = json.dumps(notification_jobs(cluster, namespace, run))
    status = json.dumps((get(cluster, "workflowruns.towline.dev", run, namespace) or {}).get("status"))
    events_text = cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    for where, text in (("Job", jobs), ("run status", status), ("events", events_text)):
        assert SIGNING_SECRET not in text and base64.b64encode(SIGNING_KEY).decode() not in text, where


def test_each_approval_event_is_announced_once_across_operator_kills(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    create_signing_secret(cluster, ns)
    held = threading.Event()
    with ScriptedServer() as server:
        sink = server.script("/approvals", (200, {}, {}), hold=held)
        apply(cluster, notifying_workflow(ns, server.url))
        run = start_run(cluster, ns, "ship", "ship-1")
        approval = f"{run}-review"
        try:
            # Kill 1: the Approval exists; the pass that made it may not have created the Job or written status.
            wait_for("the Approval", lambda: get(cluster, "approvals.towline.dev", approval, ns), interval=0.05)
            towline_operator.kill()
            towline_operator.start()
            # Kill 2: the opened notification is being delivered (the sink holds its answer).
            wait_for("the opened notification to reach the sink", lambda: sink.requests, timeout=120)
            towline_operator.kill()
            towline_operator.start()
        finally:
            held.set()
        wait_for("the opened notification Job to finish", lambda: all_complete(cluster, ns, run, 1), timeout=120)
        decided = cluster.kubectl("patch", "approval", approval, "-n", ns, "--type", "merge", "-p",
                                  json.dumps({"spec": {"decision": "Approved", "decidedBy": "bob"}}), user="bob",
                                  check=False)
        assert decided.returncode == 0, decided.stderr
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
        jobs = wait_for("both notification Jobs to finish", lambda: all_complete(cluster, ns, run, 2), timeout=120)
        assert events(sink) == Counter({"approval.opened": 1, "approval.decided": 1}), sink.requests
        assert all(signed(request) for request in sink.requests), "signed with the mounted Secret"
        opened = json.loads(sink.requests[0]["body"])
        assert opened["approveCommand"] == f"kubectl towline -n {ns} approve {approval}"
        assert f"run {run}" in opened["text"] and "step review" in opened["text"] and "users bob" in opened["text"]
    assert done["status"]["phase"] == "Succeeded"
    records = step_status(done, "review")["notifications"]
    assert sorted((r["event"], r["jobName"]) for r in records) == sorted(
        (job["metadata"]["labels"][NOTIFICATION_LABEL].split("-")[0], job["metadata"]["name"]) for job in jobs)
    assert len(jobs) == 2, "one Job per event, whatever the kills"
    assert_no_secret_anywhere(cluster, ns, run)


def test_an_expired_approval_is_announced_once(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    create_signing_secret(cluster, ns)
    with ScriptedServer() as server:
        sink = server.script("/approvals", (200, {}, {}))
        apply(cluster, notifying_workflow(ns, server.url, expires_after="5s"))
        run = start_run(cluster, ns, "ship", "ship-2")
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
        assert step_status(done, "review")["reason"] == "Expired"
        wait_for("both notification Jobs to finish", lambda: all_complete(cluster, ns, run, 2), timeout=120)
        assert events(sink) == Counter({"approval.opened": 1, "approval.expired": 1}), sink.requests
        expired = next(json.loads(r["body"]) for r in sink.requests if '"approval.expired"' in r["body"])
        assert "without a decision" in expired["text"]


@pytest.fixture
def standby(towline_operator: OperatorProcess, tmp_path: Path) -> Iterator[OperatorProcess]:
    """A second replica on the session operator's Lease; the session operator is started again afterwards."""
    replica = replica_of(towline_operator, f"{towline_operator.identity}-standby", tmp_path / "standby.log").start()
    yield replica
    replica.stop()
    if towline_operator.process is None or towline_operator.process.poll() is not None:
        towline_operator.start()


def test_each_approval_event_is_announced_once_across_a_leader_change(
    towline_operator: OperatorProcess, standby: OperatorProcess, towline_installed: ControlPlane,
    team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    create_signing_secret(cluster, ns)
    with ScriptedServer() as server:
        sink = server.script("/approvals", (200, {}, {}))
        apply(cluster, notifying_workflow(ns, server.url))
        assert wait_for("the session operator to hold the Lease",
                        lambda: lease_holder(cluster, towline_operator) == towline_operator.identity)
        run = start_run(cluster, ns, "ship", "ship-3")
        approval = f"{run}-review"
        wait_for("the Approval", lambda: get(cluster, "approvals.towline.dev", approval, ns), interval=0.05)
        towline_operator.kill()
        wait_for("the standby to take the Lease",
                 lambda: lease_holder(cluster, standby) == standby.identity, timeout=90)
        wait_for("the opened notification", lambda: sink.requests, timeout=120)
        decided = cluster.kubectl("patch", "approval", approval, "-n", ns, "--type", "merge", "-p",
                                  json.dumps({"spec": {"decision": "Approved", "decidedBy": "bob"}}), user="bob",
                                  check=False)
        assert decided.returncode == 0, decided.stderr
        assert wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
        jobs = wait_for("both notification Jobs to finish", lambda: all_complete(cluster, ns, run, 2), timeout=120)
        assert events(sink) == Counter({"approval.opened": 1, "approval.decided": 1}), sink.requests
        assert len(jobs) == 2
