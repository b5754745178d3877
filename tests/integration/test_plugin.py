"""`kubectl towline` against the local control plane, as alice, bob and carol.

Each command runs as the installed `kubectl-towline` console script (one test
through kubectl's own plugin discovery), with the person's kubeconfig context;
the chart's RBAC and admission policies decide what they may do.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.pluginsupport import BIN, created_name, ok, towline
from tests.integration.support import (
    ScriptedServer,
    apply,
    bind_role,
    create,
    get,
    list_objects,
    step_status,
    wait_for,
    wait_for_phase,
)
from tests.integration.workflows import release_workflow, three_steps

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]


def test_run_status_approve_as_allowed_and_forbidden_user_graph_export_logs(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/status", (200, {"version": "2.0.0"}, {}))
        api.script("/release", (201, {"released": True}, {}))
        apply(cluster, release_workflow(ns, api.url))
        started = ok(towline(cluster, ns, "run", "release", "-p", "env=staging"))
        assert "requested by carol" in started
        run = created_name(started)
        assert get(cluster, "workflowruns.towline.dev", run, ns)["spec"]["requestedBy"] == "carol"
        waiting = wait_for_phase(cluster, ns, run, {"AwaitingApproval"})
        approval = step_status(waiting, "review")["approvalName"]
        wait_for("the Approval", lambda: get(cluster, "approvals.towline.dev", approval, ns))

        listed = ok(towline(cluster, ns, "runs"))
        assert run in listed and "AwaitingApproval" in listed and "carol" in listed
        assert f"waiting for approval {approval}" in ok(towline(cluster, ns, "status", run))

        forbidden = towline(cluster, ns, "approve", approval, user="alice")
        assert forbidden.returncode == 1
        assert "not an allowed approver" in forbidden.stderr
        self_approval = towline(cluster, ns, "approve", approval, user="carol")
        assert self_approval.returncode == 1 and "four-eyes" in self_approval.stderr
        assert "approved by bob" in ok(towline(cluster, ns, "approve", approval, user="bob"))
        assert get(cluster, "approvals.towline.dev", approval, ns)["spec"]["decidedBy"] == "bob"

        wait_for_phase(cluster, ns, run, {"Succeeded"})
        tree = ok(towline(cluster, ns, "status", run))
        assert "review" in tree and "approved by bob" in tree
        assert "page_oncall" in tree and "Skipped" in tree

        drawn = ok(towline(cluster, ns, "graph", run, "-o", "dot"))
        assert 'check [label="check\\nhttp.request\\nSucceeded", fillcolor="#a5d6a7"' in drawn
        assert 'page_oncall [label="page_oncall\\ndata.transform\\nSkipped", fillcolor="#f5f5f5"' in drawn
        assert "check -> review;" in drawn
        workflow_graph = ok(towline(cluster, ns, "graph", "release"))
        assert workflow_graph.startswith("flowchart TD") and "review --> release" in workflow_graph
        assert "classDef" not in workflow_graph, "a workflow has no states to colour"

        exported = yaml.safe_load(ok(towline(cluster, ns, "export", "release")))
        server = get(cluster, "workflows.towline.dev", "release", ns)
        assert exported == {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                            "metadata": {"name": "release", "namespace": ns}, "spec": server["spec"]}
        assert {"uid", "resourceVersion", "annotations"} <= set(server["metadata"]) and "status" in server, \
            "there was something to drop"

        bind_role(cluster, ns, "towline-log-reader", users=("carol",))  # the runner role reads no pod logs
        logs = towline(cluster, ns, "logs", run, "check")
        assert logs.returncode == 0, logs.stderr
        # The container's own output, read through the API server from the kubelet as carol.
        assert "==> step check attempt 1" in logs.stdout and "running http.request" in logs.stdout
        missing = towline(cluster, ns, "logs", "no-such-run")
        assert missing.returncode == 1 and "no WorkflowRun 'no-such-run'" in missing.stderr


def test_suspend_resume_and_cancel_through_kubectl_plugin_discovery(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}

    def kubectl_towline(*args: str) -> str:
        argv = [str(cluster.binaries.path("kubectl")), "towline", "--kubeconfig", str(cluster.kubeconfig),
                "--context", "carol", "-n", ns, *args]
        return ok(subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False))

    with ScriptedServer() as api:
        api.script("/status", (200, {"version": "2.0.0"}, {}))
        apply(cluster, release_workflow(ns, api.url))
        run = created_name(kubectl_towline("run", "release"))
        wait_for_phase(cluster, ns, run, {"AwaitingApproval"})
        assert "suspended" in kubectl_towline("suspend", run)
        assert get(cluster, "workflowruns.towline.dev", run, ns)["spec"]["suspend"] is True
        wait_for("the Suspended condition", lambda: any(
            c["type"] == "Suspended" and c["status"] == "True"
            for c in get(cluster, "workflowruns.towline.dev", run, ns)["status"].get("conditions", [])))
        assert "resumed" in kubectl_towline("resume", run)
        resumed = get(cluster, "workflowruns.towline.dev", run, ns)
        assert resumed["spec"]["suspend"] is False
        assert resumed["metadata"]["annotations"]["towline.dev/resume"]
        assert "cancelled" in kubectl_towline("cancel", run)
        done = wait_for_phase(cluster, ns, run, {"Cancelled"})
        assert done["spec"]["cancel"] is True

        second = created_name(kubectl_towline("run", "release"))
        approval = step_status(wait_for_phase(cluster, ns, second, {"AwaitingApproval"}), "review")["approvalName"]
        wait_for("the Approval", lambda: get(cluster, "approvals.towline.dev", approval, ns))
        rejected = towline(cluster, ns, "reject", approval, "--reason", "not during the freeze", user="bob")
        assert "rejected by bob" in ok(rejected)
        failed = wait_for_phase(cluster, ns, second, {"Failed", "Succeeded"})
        assert failed["status"]["phase"] == "Failed"
        assert "freeze" in (step_status(failed, "review").get("message") or "")
        decided = get(cluster, "approvals.towline.dev", approval, ns)["spec"]
        assert (decided["decision"], decided["decidedBy"], decided["reason"]) == (
            "Rejected", "bob", "not during the freeze")

    missing = towline(cluster, ns, "run", "no-such-workflow")
    assert missing.returncode == 1 and "no Workflow 'no-such-workflow'" in missing.stderr
    examples = sorted(str(p) for p in (Path(__file__).parents[2] / "examples").glob("*.yaml"))
    assert "valid" in kubectl_towline("validate", *examples)


def test_retry_of_a_run_that_failed_at_its_third_step_reruns_from_that_step(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        fetch = api.script("/fetch", (200, {"n": 3}, {}))
        shape = api.script("/shape", (200, {"total": 30}, {}))
        push = api.script("/push", (400, {"error": "quota"}, {}), (200, {"ok": True}, {}))
        apply(cluster, three_steps(ns, api.url))
        failed = towline(cluster, ns, "run", "sync", "--follow")
        assert failed.returncode == 1 and "Failed" in failed.stdout
        first = created_name(failed.stdout)
        assert step_status(get(cluster, "workflowruns.towline.dev", first, ns), "push")["phase"] == "Failed"

        retried = ok(towline(cluster, ns, "retry", first, "--follow"))
        assert f"retry of {first}, reusing fetch, shape" in retried and "Succeeded" in retried
        second = created_name(retried)
        run = get(cluster, "workflowruns.towline.dev", second, ns)
        assert run["spec"]["retryOf"] == {"run": first, "reuse": ["fetch", "shape"]}
        assert run["spec"]["requestedBy"] == "carol"
        assert [step_status(run, s)["reason"] for s in ("fetch", "shape")] == ["Reused", "Reused"]
        assert step_status(run, "shape")["output"] == {"total": 30}
        assert len(fetch.requests) == 1 and len(shape.requests) == 1, "reused steps did not run again"
        assert [json.loads(r["body"]) for r in push.requests] == [{"total": 30}, {"total": 30}]
        jobs = list_objects(cluster, "jobs", ns, f"towline.dev/run={second}")
        assert [j["metadata"]["labels"]["towline.dev/step"] for j in jobs] == ["push"]
        assert "output reused from run" in ok(towline(cluster, ns, "status", second))


def test_a_runner_cannot_hand_a_retry_outputs_of_their_own(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/fetch", (200, {"n": 3}, {}))
        api.script("/shape", (200, {"total": 30}, {}))
        push = api.script("/push", (400, {"error": "quota"}, {}), (200, {"ok": True}, {}))
        apply(cluster, three_steps(ns, api.url))
        first = created_name(towline(cluster, ns, "run", "sync", "--follow").stdout)
        assert get(cluster, "workflowruns.towline.dev", first, ns)["status"]["phase"] == "Failed"

        def retry_run(name: str, spec: dict[str, Any]) -> Any:
            return create(cluster, {
                "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"workflowRef": {"name": "sync"}, "requestedBy": "carol", **spec},
            }, user="carol", check=False)

        # Outputs written into the spec are not part of the API: the server refuses them.
        smuggled = retry_run("smuggle", {"retryOf": {"run": first, "reuse": ["fetch", "shape"],
                                                     "outputs": {"shape": {"total": 999}}}})
        assert smuggled.returncode != 0 and "outputs" in smuggled.stderr
        # A status written at creation is dropped (status is a subresource) and carol may not write it.
        created = retry_run("forged", {"retryOf": {"run": first, "reuse": ["fetch"]}})
        assert created.returncode == 0, created.stderr
        forged_status = cluster.kubectl(
            "patch", "workflowrun", "forged", "-n", ns, "--subresource=status", "--type", "merge", "-p",
            json.dumps({"status": {"steps": [{"id": "shape", "phase": "Succeeded", "output": {"total": 999}}]}}),
            user="carol", check=False)
        assert forged_status.returncode != 0 and "forbidden" in forged_status.stderr.lower()
        done = wait_for_phase(cluster, ns, "forged", {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded"
        assert step_status(done, "shape")["output"] == {"total": 30}, "shape ran again for real"
        assert [json.loads(r["body"]) for r in push.requests][-1] == {"total": 30}

        # Reusing the failed step, or retrying a run of another workflow, fails with the field named.
        retry_run("reuse-failed", {"retryOf": {"run": first, "reuse": ["fetch", "shape", "push"]}})
        refused = wait_for_phase(cluster, ns, "reuse-failed", {"Failed", "Succeeded"})
        assert refused["status"]["phase"] == "Failed"
        assert "spec.retryOf.reuse[2]: step 'push'" in refused["status"]["message"]
        apply(cluster, {**three_steps(ns, api.url), "metadata": {"name": "other", "namespace": ns}})
        other = create(cluster, {
            "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
            "metadata": {"name": "cross", "namespace": ns},
            "spec": {"workflowRef": {"name": "other"}, "requestedBy": "carol",
                     "retryOf": {"run": first, "reuse": ["fetch"]}},
        }, user="carol", check=False)
        assert other.returncode == 0, other.stderr
        crossed = wait_for_phase(cluster, ns, "cross", {"Failed", "Succeeded"})
        assert crossed["status"]["phase"] == "Failed" and "same workflow" in crossed["status"]["message"]

        # Once the author changes the workflow, a retry cannot bring back what the old run ran.
        changed = three_steps(ns, api.url)
        changed["spec"]["steps"][2]["with"]["url"] = f"{api.url}/push-v2"
        apply(cluster, changed)
        stale = towline(cluster, ns, "retry", first)
        assert stale.returncode == 0, stale.stderr
        refused_stale = wait_for_phase(cluster, ns, created_name(stale.stdout), {"Failed", "Succeeded"})
        assert refused_stale["status"]["phase"] == "Failed"
        assert "changed since run" in refused_stale["status"]["message"]
        assert len(push.requests) == 2, "nothing ran for the refused retries"
