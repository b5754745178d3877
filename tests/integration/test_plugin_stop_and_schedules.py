"""`kubectl towline stop` and `schedule suspend|resume` against the local control plane and the real node, as the
people who use them: bob (a runner) stops a run, carol (a viewer, no patch on runs) cannot; alice (a Workflow
author) suspends and resumes a schedule trigger, bob (no patch on Workflows) cannot."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from tests.integration.pluginsupport import created_name, ok, towline
from tests.integration.support import (
    ScriptedServer,
    apply,
    bind_role,
    get,
    list_objects,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration]
RUNS = "workflowruns.towline.dev"


def people(cluster: ControlPlane, ns: str) -> None:
    bind_role(cluster, ns, "towline-workflow-author", users=("alice",))
    bind_role(cluster, ns, "towline-runner", users=("bob",))
    bind_role(cluster, ns, "towline-viewer", users=("carol",))


def test_stop_ends_the_running_step_and_never_starts_finally(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str, test_hosts: str
) -> None:
    cluster, ns = towline_installed, namespace
    people(cluster, ns)
    hold = threading.Event()
    with ScriptedServer() as api:
        slow = api.script("/slow", (200, {}, {}), hold=hold)
        apply(cluster, {
            "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "slow", "namespace": ns},
            "spec": {"steps": [{"id": "crawl", "action": "http.request", "timeoutSeconds": 300,
                                "with": {"url": f"{api.url}/slow", "timeoutSeconds": 240}}],
                     "finally": [{"id": "tell", "action": "data.transform",
                                  "with": {"data": {}, "fields": {"done": "true"}}}]},
        })
        run = created_name(ok(towline(cluster, ns, "run", "slow", user="bob")))
        wait_for("the step to call the slow endpoint", lambda: slow.requests)

        refused = towline(cluster, ns, "stop", run, user="carol")  # a viewer: RBAC has no patch for her
        assert refused.returncode == 1 and "forbidden: you may not patch workflowruns.towline.dev" in refused.stderr
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert not (get(cluster, RUNS, run, ns) or {})["spec"].get("stop")

        assert ok(towline(cluster, ns, "stop", run, user="bob")) == f"workflowrun/{run} stopped (no finally steps)\n"
        done = wait_for_phase(cluster, ns, run, {"Cancelled", "Failed", "Succeeded"}, timeout=60)
        hold.set()
    succeeded = next(c for c in done["status"]["conditions"] if c["type"] == "Succeeded")
    assert done["status"]["phase"] == "Cancelled" and succeeded["reason"] == "Stopped", done["status"]
    assert step_status(done, "crawl")["phase"] == "Cancelled"
    assert step_status(done, "tell")["phase"] == "Skipped" and step_status(done, "tell")["reason"] == "Stopped"
    wait_for("the crawl Job to be deleted", lambda: not list_objects(cluster, "jobs", ns, f"towline.dev/run={run}"),
             timeout=60)
    # The run is over: no pass of the operator makes the finally step's Job any more.
    assert not list_objects(cluster, "jobs", ns, "towline.dev/step=tell")

    back = cluster.kubectl("patch", "workflowrun", run, "-n", ns, "--type", "merge", "-p",
                           json.dumps({"spec": {"stop": False}}), user="bob", check=False)
    assert back.returncode != 0 and "a stopped run stays stopped" in back.stderr


def annotations(cluster: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    return dict(((get(cluster, "workflows.towline.dev", name, ns) or {})["metadata"]).get("annotations") or {})


def schedule_of(cluster: ControlPlane, ns: str, name: str, trigger: str) -> dict[str, Any] | None:
    status = (get(cluster, "workflows.towline.dev", name, ns) or {}).get("status") or {}
    return next((entry for entry in status.get("schedules") or [] if entry.get("trigger") == trigger), None)


def test_schedule_suspend_and_resume_per_trigger_as_a_workflow_author(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str
) -> None:
    cluster, ns = towline_installed, namespace
    people(cluster, ns)
    steps = [{"id": "review", "approval": {"message": "go?", "approvers": {"users": ["bob"]}}}]
    apply(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "report", "namespace": ns, "labels": {"app.kubernetes.io/instance": "reports"},
                     "annotations": {"suspend.towline.dev/yearly": "true"}},  # this one is git's own
        "spec": {"triggers": [{"name": "new_year", "schedule": {"cron": "0 0 1 1 *"}},
                              {"name": "yearly", "schedule": {"cron": "0 0 2 1 *"}}],
                 "steps": steps},
    })
    wait_for("the operator to see both triggers", lambda: (
        (found := schedule_of(cluster, ns, "report", "new_year")) and found.get("nextScheduleTime")))

    denied = towline(cluster, ns, "schedule", "suspend", "report", "new_year", user="bob")  # a runner
    assert denied.returncode == 1 and "forbidden: you may not patch workflows.towline.dev" in denied.stderr
    assert "Traceback" not in denied.stderr
    wrong = towline(cluster, ns, "schedule", "suspend", "report", "nope", user="alice")
    assert wrong.returncode == 2 and "TRIGGER nope is not a trigger of it" in wrong.stderr
    assert wrong.stderr.count("\n") == 1

    paused = towline(cluster, ns, "schedule", "suspend", "report", "new_year", user="alice")
    assert ok(paused) == "workflow/report new_year suspended\n"
    assert "synced by a GitOps tool (app.kubernetes.io/instance)" in paused.stderr
    assert annotations(cluster, ns, "report")["suspend.towline.dev/new_year"] == "true"
    shown_fields = cluster.kubectl("get", "workflow", "report", "-n", ns, "-o", "json", "--show-managed-fields")
    managers = {entry["manager"] for entry in json.loads(shown_fields.stdout)["metadata"]["managedFields"]}
    assert "kubectl-towline-schedule" in managers, json.loads(shown_fields.stdout)["metadata"]["managedFields"]
    entry = wait_for("the operator to honour the suspension", lambda: (
        (found := schedule_of(cluster, ns, "report", "new_year")) and found.get("suspended") and found))
    assert "nextScheduleTime" not in entry
    shown = ok(towline(cluster, ns, "workflows", "show", "report", user="carol"))
    assert "new_year: schedule 0 0 1 1 * (UTC, Allow); suspended (kubectl towline schedule resume report " \
           "new_year)" in shown, shown

    assert ok(towline(cluster, ns, "schedule", "resume", "report", "new_year", user="alice")) == \
        "workflow/report new_year resumed\n"
    assert "suspend.towline.dev/new_year" not in annotations(cluster, ns, "report")
    wait_for("the operator to see the resume", lambda: (
        (found := schedule_of(cluster, ns, "report", "new_year")) and not found.get("suspended")
        and found.get("nextScheduleTime")))

    # git's own suspension stays: resume says where to change it.
    kept = towline(cluster, ns, "schedule", "resume", "report", "yearly", user="alice")
    assert kept.returncode == 1 and "yearly stay suspended: the Workflow's manifest (git)" in kept.stderr
    assert annotations(cluster, ns, "report")["suspend.towline.dev/yearly"] == "true"
    assert list_objects(cluster, RUNS, ns) == []
