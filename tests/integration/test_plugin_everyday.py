"""`kubectl towline` for everyday use against the local control plane, as alice, bob, carol and the admin:
`-o json|yaml|name|wide`, the `runs` filters, `describe`, `version`, kubectl's plugin completion, and
failures that are one line and an exit code (bad kubeconfig, unreachable server, Forbidden)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.integration.pluginsupport import created_name, ok
from tests.integration.support import (
    ScriptedServer,
    apply,
    bind_role,
    create,
    get,
    step_status,
    wait_for,
    wait_for_phase,
)
from tests.integration.workflows import release_workflow, three_steps

from towline.engine import job_name
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.kubeconfig import context_name

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

BIN = Path(sys.executable).parent


def towline(cluster: ControlPlane, *args: str, user: str = "carol",
            kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [str(BIN / "kubectl-towline"), "--kubeconfig", str(kubeconfig or cluster.kubeconfig),
            "--context", context_name(user), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)


def one_line_failure(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code, f"exit {result.returncode}: {result.stdout}\n{result.stderr}"
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def test_runs_filters_and_output_formats(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/fetch", (200, {"n": 3}, {}))
        api.script("/shape", (200, {"total": 30}, {}))
        api.script("/push", (400, {"error": "quota"}, {}), (200, {"ok": True}, {}))
        apply(cluster, three_steps(ns, api.url))
        failed = created_name(towline(cluster, "-n", ns, "run", "sync", "--follow").stdout)
        succeeded = created_name(ok(towline(cluster, "-n", ns, "run", "sync", "--follow")))
        # A run's labels are set at creation (only the operator may change them later).
        labelled = create(cluster, {
            "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
            "metadata": {"name": f"{succeeded}-gold", "namespace": ns, "labels": {"tier": "gold"}},
            "spec": {"workflowRef": {"name": "sync"}, "requestedBy": "carol"},
        }, user="carol", check=False)
        assert labelled.returncode == 0, labelled.stderr
        gold = f"{succeeded}-gold"
        wait_for_phase(cluster, ns, gold, {"Succeeded"})
    assert get(cluster, "workflowruns.towline.dev", failed, ns)["status"]["phase"] == "Failed"

    def runs(*args: str, user: str = "carol") -> str:
        return ok(towline(cluster, "-n", ns, "runs", *args, user=user))

    assert runs("-o", "name").splitlines() == [f"workflowrun/{n}" for n in (failed, succeeded, gold)]
    listed = json.loads(runs("-o", "json"))
    assert listed["kind"] == "List" and [i["kind"] for i in listed["items"]] == ["WorkflowRun"] * 3
    server = get(cluster, "workflowruns.towline.dev", failed, ns)
    assert listed["items"][0]["metadata"]["uid"] == server["metadata"]["uid"]
    assert listed["items"][0]["status"]["phase"] == "Failed"
    assert [i["metadata"]["name"] for i in yaml.safe_load(runs("-o", "yaml"))["items"]] == [failed, succeeded, gold]
    wide = runs("-o", "wide").splitlines()
    assert wide[0].split()[-3:] == ["AGE", "TRIGGER", "MESSAGE"]
    assert failed in wide[1] and "manual" in wide[1] and "push" in wide[1]

    assert runs("--phase", "failed", "-o", "name") == f"workflowrun/{failed}\n"
    assert runs("--phase", "Failed,Succeeded", "-o", "name").count("workflowrun/") == 3
    assert runs("--phase", "Running") == "No runs.\n"
    assert "unknown phase 'Done'; use one or more of Pending" in one_line_failure(
        towline(cluster, "-n", ns, "runs", "--phase", "Done"), 2)
    assert runs("-l", "tier=gold", "-o", "name") == f"workflowrun/{gold}\n"
    refused = one_line_failure(towline(cluster, "-n", ns, "runs", "-l", "tier in ("))
    assert "error from the API server (400)" in refused, "the selector went to the API server, which refused it"
    assert runs("--workflow", "sync", "--last", "2", "-o", "name") == f"workflowrun/{succeeded}\nworkflowrun/{gold}\n"
    assert runs("--since", "1h", "-o", "name").count("workflowrun/") == 3
    assert runs("--workflow", "other") == "No runs.\n"
    assert "--since: '1 hour' is not a duration" in one_line_failure(
        towline(cluster, "-n", ns, "runs", "--since", "1 hour"), 2)

    everywhere = ok(towline(cluster, "runs", "-A", "--phase", "Failed", user="admin")).splitlines()
    assert everywhere[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [ns, failed] in [line.split()[:2] for line in everywhere[1:]]
    # carol may list runs in her team's namespace only: RBAC refuses the rest, in one line.
    assert "you may not list workflowruns.towline.dev cluster-wide; your user lacks the RBAC permission" in \
        one_line_failure(towline(cluster, "runs", "-A"))
    assert "you may not list workflowruns.towline.dev in namespace default" in \
        one_line_failure(towline(cluster, "-n", "default", "runs"))

    assert json.loads(ok(towline(cluster, "-n", ns, "status", failed, "-o", "json")))["status"]["phase"] == "Failed"
    assert ok(towline(cluster, "-n", ns, "status", failed, "-o", "name")) == f"workflowrun/{failed}\n"
    as_yaml = yaml.safe_load(ok(towline(cluster, "-n", ns, "status", failed, "-o", "yaml")))
    assert as_yaml["kind"] == "WorkflowRun" and as_yaml["metadata"]["name"] == failed
    assert [step["id"] for step in as_yaml["status"]["steps"]] == ["fetch", "shape", "push"]
    assert f"job {job_name(failed, 'push', 1)}" in ok(towline(cluster, "-n", ns, "status", failed, "-o", "wide"))
    missing = one_line_failure(towline(cluster, "-n", ns, "describe", "no-such-run"))
    assert "no WorkflowRun 'no-such-run'" in missing


def test_describe_a_run_with_a_failed_attempt_and_an_approval(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/status", (503, {"error": "warming up"}, {}), (200, {"version": "2.0.0"}, {}))
        api.script("/release", (201, {"released": True}, {}))
        apply(cluster, release_workflow(ns, api.url))
        run = created_name(ok(towline(cluster, "-n", ns, "run", "release", "-p", "env=staging")))
        approval = step_status(wait_for_phase(cluster, ns, run, {"AwaitingApproval"}), "review")["approvalName"]
        wait_for("the Approval", lambda: get(cluster, "approvals.towline.dev", approval, ns))
        ok(towline(cluster, "-n", ns, "approve", approval, "--reason", "canary looks good", user="bob"))
        wait_for_phase(cluster, ns, run, {"Succeeded"})

    described = towline(cluster, "-n", ns, "describe", run)
    text = ok(described)
    decided_at = get(cluster, "approvals.towline.dev", approval, ns)["status"]["decidedAt"]
    for expected in (
        f"Name:          {run}", "Phase:         Succeeded", "Requested by:  carol", "Trigger:       manual",
        "Params:\n  env: staging",
        "  check  http.request  Succeeded\n    attempt 2",
        "    Attempt 1: ", "error class transient",
        f"    Inputs:\n      select: response.body\n      url: {api.url}/status",
        "    Output:\n      version: 2.0.0",
        f"    Approval: {approval}, approved by bob",
        f"  {approval}  step review  Approved\n    Approvers: bob, carol (four eyes: not the requester)",
        f"    Approved by bob at {decided_at}\n    Why: canary looks good",
    ):
        assert expected in text, f"{expected!r} not in:\n{text}"
    # The runner role reads no Events: said on stderr, the rest is shown.
    assert "Events:        <none>" in text
    assert "you may not list Events" in described.stderr

    bind_role(cluster, ns, "view", users=("carol",))

    def described_with_events() -> str | None:
        text = ok(towline(cluster, "-n", ns, "describe", run))
        return text if "RunSucceeded" in text else None

    with_events = wait_for("the run's Events", described_with_events)
    assert "ApprovalRequested" in with_events and "RunStarted" in with_events
    kinds = [item["kind"] for item in yaml.safe_load(ok(towline(cluster, "-n", ns, "describe", run, "-o", "yaml")))
             ["items"]]
    assert kinds[:2] == ["WorkflowRun", "Approval"] and set(kinds[2:]) == {"Event"} and len(kinds) > 3


def test_version_bad_kubeconfigs_and_kubectl_plugin_completion(towline_installed: ControlPlane,
                                                               tmp_path: Path) -> None:
    cluster = towline_installed
    admin = ok(towline(cluster, "version", user="admin")).splitlines()
    assert admin[0].startswith("Client (kubectl-towline): 0.")
    assert admin[1].startswith("Kubernetes: v1.35.")
    assert admin[2].startswith("Towline")
    carol = ok(towline(cluster, "version")).splitlines()
    assert carol[1] == admin[1]
    assert carol[2] == "Towline: not visible to you (403: you may not list Deployments cluster-wide)"

    # The cluster's own credentials, pointed at a port nothing listens on.
    document = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in document["clusters"]:
        entry["cluster"]["server"] = "https://127.0.0.1:1"
    unreachable = tmp_path / "unreachable"
    unreachable.write_text(yaml.safe_dump(document))
    refused = one_line_failure(towline(cluster, "runs", kubeconfig=unreachable))
    assert refused.startswith("error: cannot reach the API server") and "127.0.0.1" in refused
    down = ok(towline(cluster, "version", kubeconfig=unreachable)).splitlines()
    assert down[0] == admin[0] and down[1].startswith("Server: not reachable")
    garbage = tmp_path / "garbage"
    garbage.write_text("clusters: [unclosed\n")
    assert f"cannot read kubeconfig {garbage}" in one_line_failure(towline(cluster, "runs", kubeconfig=garbage))
    assert "no such file" in one_line_failure(towline(cluster, "runs", kubeconfig=tmp_path / "absent"))
    # No kubeconfig at all: neither $KUBECONFIG nor ~/.kube/config, and not in a pod.
    bare = {key: value for key, value in os.environ.items()
            if key not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    nothing = subprocess.run([str(BIN / "kubectl-towline"), "runs"], capture_output=True, text=True, timeout=60,
                             env={**bare, "HOME": str(tmp_path / "empty-home")}, check=False)
    assert "kubeconfig" in one_line_failure(nothing).lower()

    # The catalog a step author reads: the built-ins with the step types this person may see. carol may not read
    # step types in `default` (one line); the admin may.
    assert "you may not list steptypes.towline.dev in namespace default" in \
        one_line_failure(towline(cluster, "connectors"))
    catalog = ok(towline(cluster, "connectors", user="admin"))
    assert "http.request" in catalog and "data.transform" in catalog
    actions = json.loads(ok(towline(cluster, "connectors", "--json", user="admin")))["actions"]
    assert {"http.request", "data.transform", "code.python"} <= set(actions), sorted(actions)

    # kubectl completes `kubectl towline ...` by running kubectl_complete-towline from PATH.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    completed = subprocess.run([str(cluster.binaries.path("kubectl")), "__complete", "towline", "runs", "--phase",
                                "F"], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["Failed", ":4"]
    assert "About to call: " + str(BIN / "kubectl_complete-towline") in completed.stderr
