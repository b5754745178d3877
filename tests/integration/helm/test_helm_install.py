"""`helm install` of the chart and what runs from it: the objects, Pod Security, the admission policy,
`watchNamespaces`, `helm test`, the README's approval walkthrough against the Helm-installed operator,
the canary-Secret log scan, and the archive's record of a pruned run as two people may read it.
Fixtures: conftest.py in this directory.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.integration.helm.release import (
    Cluster,
    container_env,
    deployment,
    image_values,
    install,
    on,
    uninstall,
)
from tests.integration.helmsupport import find, render
from tests.integration.pluginsupport import towline
from tests.integration.support import bind_role, start_run, step_status, wait_for, wait_for_phase

from towline.k8s.labels import LABEL_STEP
from towline_dev.install import OperatorProcess, operator_kubeconfig
from towline_dev.processes import free_loopback_port
from towline_dev.release import NAMESPACE, RELEASE, api_server_egress, wait_rolled_out

pytestmark = pytest.mark.integration


def test_helm_install_establishes_the_crds_and_creates_every_object(installed: Cluster) -> None:
    status = json.loads(on(installed, "status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    installed.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                      "crd/workflows.towline.dev", "crd/workflowruns.towline.dev", "crd/approvals.towline.dev",
                      "crd/steptypes.towline.dev", "crd/clustersteptypes.towline.dev")
    manifest = on(installed, "get", "manifest", RELEASE, "-n", NAMESPACE).stdout
    present = installed.kubectl("get", "-f", "-", "-o", "name", stdin=manifest, check=False)
    assert present.returncode == 0, present.stderr
    found = deployment(installed)
    assert found["spec"]["replicas"] == 2
    (container,) = found["spec"]["template"]["spec"]["containers"]
    values = image_values()
    assert container["image"] == f"{values['image.repository']}:{values['image.tag']}"
    assert container_env(found)["TOWLINE_RUNNER_IMAGE"] == values["runner.image"]


def test_chart_pods_are_admitted_under_restricted_pod_security(installed: Cluster) -> None:
    def operator_pods() -> list[dict[str, Any]] | None:
        pods = json.loads(installed.kubectl(
            "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator", "-o", "json").stdout)["items"]
        return pods if len(pods) >= 2 else None

    # The ReplicaSet's pods exist only if admission let them in (else: FailedCreate events, no pods).
    wait_for("the operator's pods to be admitted", operator_pods, timeout=60)
    hooks = on(installed, "get", "hooks", RELEASE, "-n", NAMESPACE).stdout
    assert "towline-test-operator" in hooks
    admitted = installed.kubectl("create", "--dry-run=server", "-f", "-", stdin=hooks, check=False)
    assert admitted.returncode == 0 and "PodSecurity" not in admitted.stderr, admitted.stderr


def test_helm_installed_admission_policy_refuses_a_hand_made_approval(installed: Cluster) -> None:
    installed.kubectl("create", "namespace", "helm-attack", check=False)
    approval = {"apiVersion": "towline.dev/v1alpha1", "kind": "Approval",
                "metadata": {"name": "forged", "namespace": "helm-attack"},
                "spec": {"runName": "r", "workflowName": "w", "step": "review",
                         "expiresAt": "2099-01-01T00:00:00Z", "approvers": {"users": ["admin"]}}}

    def refused() -> str | None:
        # A new policy takes a moment to be enforced; until then a create may pass, so delete and retry.
        result = installed.kubectl("create", "-f", "-", stdin=json.dumps(approval), check=False)
        if result.returncode == 0:
            installed.kubectl("delete", "approval", "forged", "-n", "helm-attack", check=False)
            return None
        return result.stderr

    message = wait_for("the chart's admission policy to refuse a hand-made Approval", refused, timeout=60)
    assert "cannot be created by hand" in message


def _workflow(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "shape", "namespace": namespace},
            "spec": {"steps": [{"id": "shape", "action": "data.transform",
                                "with": {"data": {"n": 2}, "fields": {"double": "data.n * 2"}}}]}}


def _status(cluster: Cluster, namespace: str) -> dict[str, Any]:
    found = json.loads(cluster.kubectl("get", "workflows.towline.dev", "shape", "-n", namespace, "-o", "json").stdout)
    status: dict[str, Any] = found.get("status") or {}
    return status


def test_watch_namespaces_confines_the_operator_to_them(
    installed: Cluster, tmp_path: Path
) -> None:
    # `installed`: release towline put the CRDs there, and keeps them when it is uninstalled below.
    cluster, release_namespace = installed, "towline-scoped"
    # A release watching every namespace leaves no room for another: the chart refuses the second.
    uninstall(cluster, RELEASE, NAMESPACE)
    for namespace in ("watched", "unwatched"):
        cluster.kubectl("create", "namespace", namespace, check=False)
    # The CRDs stay with release towline (crds.keep): a second release leaves them alone.
    install(cluster, "scoped", release_namespace, {"watchNamespaces": '["watched"]', "crds.enabled": "false"})
    operator: OperatorProcess | None = None
    try:
        kubeconfig = operator_kubeconfig(cluster, tmp_path / "operator.kubeconfig", namespace=release_namespace)
        # The operator is told what to watch exactly as the chart's Deployment tells it.
        told = container_env(deployment(cluster, release_namespace, "scoped"))["TOWLINE_WATCH_NAMESPACES"]
        assert told == "watched"
        ports = {"health": free_loopback_port(), "metrics": free_loopback_port()}
        operator = OperatorProcess(kubeconfig=kubeconfig, log_path=tmp_path / "operator.log",
                                   namespace=release_namespace, watch_namespaces=tuple(told.split(",")),
                                   health_port=ports["health"], metrics_port=ports["metrics"]).start()
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_workflow("unwatched")))
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_workflow("watched")))
        # Workflows are reconciled in the order they arrive: once the later one is Ready, the
        # earlier one would be too, had the operator seen it.
        wait_for("the watched namespace's Workflow to be Ready",
                 lambda: _status(cluster, "watched").get("conditions"), timeout=90)
        assert _status(cluster, "unwatched") == {}, "the operator acted outside watchNamespaces"
        # It never asked to list namespaces, which its RBAC forbids (kopf retried that for a minute before it
        # acted on anything: towline.runtime.wiring.names_only).
        assert "/api/v1/namespaces?" not in operator.log_text(), operator.log_text()[-3000:]

        # Its ServiceAccount cannot act there either: the API server refuses it.
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "escape", "namespace": "unwatched"},
               "spec": {"template": {"spec": {"restartPolicy": "Never",
                                              "containers": [{"name": "c", "image": "x"}]}}}}
        attempt = subprocess.run(
            [str(cluster.binaries.path("kubectl")), "--kubeconfig", str(kubeconfig), "create", "-f", "-"],
            input=json.dumps(job), capture_output=True, text=True, timeout=60, check=False)
        assert attempt.returncode != 0 and "forbidden" in attempt.stderr.lower(), attempt.stderr
        who = f"system:serviceaccount:{release_namespace}:towline-operator"
        for verb, resource, namespace, allowed in (
            ("create", "jobs.batch", "watched", "yes"), ("create", "jobs.batch", "unwatched", "no"),
            ("list", "workflows.towline.dev", "unwatched", "no"), ("list", "namespaces", "", "no"),
        ):
            scope = ["-n", namespace] if namespace else []
            answer = cluster.kubectl("auth", "can-i", verb, resource, *scope, "--as", who, check=False)
            assert answer.stdout.strip() == allowed, (verb, resource, namespace, answer.stdout, answer.stderr)
        assert operator.process is not None and operator.process.poll() is None, operator.log_text()[-3000:]
        # What the chart's probes and `helm test` ask for, served by this operator.
        for port, path, expected in ((ports["health"], "/healthz", "{"),
                                     (ports["metrics"], "/metrics", "towline_api_requests_total")):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
                assert response.status == 200 and expected in response.read().decode(), path
    finally:
        if operator is not None:
            operator.stop()
        uninstall(cluster, "scoped", release_namespace)
        for namespace in ("watched", "unwatched"):
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        # The module's other tests share `installed`'s release, in whatever order they run.
        install(cluster, RELEASE, NAMESPACE, {})


def test_helm_test_passes_against_the_running_operator(module_running_release: Cluster) -> None:
    result = on(module_running_release, "test", RELEASE, "-n", NAMESPACE, "--timeout", "5m")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"TEST SUITE:\s+towline-test-operator\s.*Phase:\s+Succeeded", result.stdout, re.S), result.stdout
    # The passed test pod is deleted (hook-succeeded), so `helm uninstall` will leave nothing behind.
    left = module_running_release.kubectl("get", "pod", "towline-test-operator", "-n", NAMESPACE, check=False)
    assert "NotFound" in left.stderr, left.stdout


def _walkthrough_workflow(namespace: str) -> dict[str, Any]:
    """The README's demo shape: a check, a four-eyes approval bob may give, then the change."""
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "hello-towline", "namespace": namespace},
            "spec": {"steps": [
                {"id": "check", "action": "data.transform",
                 "with": {"data": {"version": "2.4.1"}, "fields": {"version": "data.version"}}},
                {"id": "review", "needs": ["check"],
                 # carol is an approver here too, so what refuses her is four-eyes alone.
                 "approval": {"message": "Deploy ${{ steps.check.output.version }}?",
                              "approvers": {"users": ["bob", "carol"], "groups": ["approvers"]},
                              "fourEyes": True, "expiresAfter": "1h"}},
                {"id": "deploy", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {"v": "${{ steps.check.output.version }}"}, "fields": {"deployed": "data.v"}}},
            ]}}


def test_readme_approval_walkthrough_against_the_helm_installed_operator(module_running_release: Cluster) -> None:
    cluster, namespace = module_running_release, "towline-walkthrough"
    cluster.kubectl("create", "namespace", namespace, check=False)
    try:
        bind_role(cluster, namespace, "towline-runner", users=("carol", "alice"))
        bind_role(cluster, namespace, "towline-approver", users=("bob", "alice", "carol"))
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_walkthrough_workflow(namespace)))
        run = start_run(cluster, namespace, "hello-towline", user="carol")
        waiting = wait_for_phase(cluster, namespace, run, {"AwaitingApproval"}, timeout=300)
        approval = step_status(waiting, "review")["approvalName"]

        def decide(user: str) -> subprocess.CompletedProcess[str]:
            patch = {"spec": {"decision": "Approved", "decidedBy": user}}
            return cluster.kubectl("patch", "approval", approval, "-n", namespace, "--type", "merge",
                                   "-p", json.dumps(patch), user=user, check=False)

        assert "not an allowed approver" in decide("alice").stderr
        assert "four-eyes" in decide("carol").stderr
        assert decide("bob").returncode == 0
        done = wait_for_phase(cluster, namespace, run, {"Succeeded", "Failed"}, timeout=300)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert step_status(done, "deploy")["output"] == {"deployed": "2.4.1"}
        # The steps ran as real containers on the node: one Job each, its pod's container exited 0.
        pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
        ran = {p["metadata"]["labels"].get(LABEL_STEP): p for p in pods}
        assert set(ran) == {"check", "deploy"}, sorted(map(str, ran))
        for pod in ran.values():
            assert pod["spec"].get("nodeName") and pod["status"]["phase"] == "Succeeded", pod["status"]
            (state,) = pod["status"]["containerStatuses"]
            assert state["state"]["terminated"]["exitCode"] == 0 and state["containerID"], state
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_api_server_egress_can_be_narrowed_to_the_real_api_server(node_cluster: Cluster) -> None:
    values = api_server_egress(node_cluster)
    if not values:
        pytest.skip("this cluster's API server publishes no address behind the kubernetes Service (the local "
                    "control plane advertises it on loopback, which EndpointSlices cannot hold)")
    documents = render(node_cluster.binaries, values)
    egress = find(documents, "NetworkPolicy", "towline-operator")["spec"]["egress"][0]
    assert [peer["ipBlock"]["cidr"] for peer in egress["to"]] == json.loads(values["networkPolicy.apiServer.cidrs"])
    assert "0.0.0.0/0" not in values["networkPolicy.apiServer.cidrs"]


CANARY = "canary-4b1e8d-never-in-a-log"


def test_canary_secret_value_is_in_no_container_log_of_the_helm_installed_run(module_running_release: Cluster) -> None:
    """A step mounts a Secret holding a canary; its value appears in no container's `kubectl logs`
    (operator, ingress, step), nor in the run's status or the events, and only in its Secret."""
    cluster, namespace = module_running_release, "towline-canary"
    cluster.kubectl("create", "namespace", namespace, check=False)
    try:
        bind_role(cluster, namespace, "towline-runner", users=("carol",))
        cluster.kubectl("create", "secret", "generic", "canary-api", "-n", namespace, f"--from-literal=token={CANARY}")
        workflow = {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "uses-secret", "namespace": namespace},
                    "spec": {"steps": [{"id": "shape", "action": "data.transform", "credentials": {"api": "canary-api"},
                                        "allowHosts": ["198.51.100.202"],
                                        "with": {"data": {"n": 1}, "fields": {"n": "data.n + 1"}}}]}}
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(workflow))
        run = start_run(cluster, namespace, "uses-secret", user="carol")
        done = wait_for_phase(cluster, namespace, run, {"Succeeded", "Failed"}, timeout=300)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        pods = [(ns, p["metadata"]["name"]) for ns in (NAMESPACE, namespace)
                for p in json.loads(cluster.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]]
        assert len([ns for ns, _ in pods if ns == namespace]) == 1 and len(pods) >= 5, pods
        logs = {f"{ns}/{name}": cluster.kubectl("logs", name, "-n", ns, "--all-containers", "--prefix").stdout
                for ns, name in pods}
        # The scan reads real logs (kubectl fails the test if one cannot be read): each operator's is not empty.
        assert all(text.strip() for key, text in logs.items() if "towline-operator" in key), logs
        for key, text in logs.items():
            assert CANARY not in text, f"the canary is in the logs of {key}"
        everything = cluster.kubectl("get", "workflowruns,workflows,events,jobs,pods,configmaps", "-n", namespace,
                                     "-o", "json").stdout
        assert CANARY not in everything
        secret = cluster.kubectl("get", "secret", "canary-api", "-n", namespace, "-o", "json").stdout
        assert "token" in json.loads(secret)["data"]
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _kept_workflow(namespace: str) -> dict[str, Any]:
    """bob approves, then one step; the cluster keeps one succeeded run (the archive keeps them all)."""
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "deploy-prod", "namespace": namespace},
            "spec": {"policy": {"history": {"succeeded": 1, "failed": 1}},
                     "steps": [{"id": "review", "approval": {"approvers": {"users": ["bob"]}}},
                               {"id": "apply", "needs": ["review"], "action": "data.transform",
                                "with": {"data": {"release": "2026.12"}, "fields": {"applied": "data.release"}}}]}}


def test_the_helm_installed_archive_keeps_a_pruned_run_for_those_who_may_read_its_namespace(
    module_running_release: Cluster,
) -> None:
    """The record as an auditor meets it, with the chart's defaults: a run pruned by its Workflow's history after
    three newer runs, its pods gone with it, the operator and the archive restarted, is still listed with who
    approved it and its step's log, for carol (who may read the namespace's runs and pods' logs); alice, who may
    not read its runs, is refused it by the same API."""
    cluster, namespace = module_running_release, "towline-record"
    cluster.kubectl("create", "namespace", namespace, check=False)
    try:
        bind_role(cluster, namespace, "towline-runner", users=("carol",))
        bind_role(cluster, namespace, "towline-approver", users=("bob",))
        # An archived log is for whoever may read the namespace's pods' logs (the chart's towline-log-reader);
        # the runner role alone does not give it.
        bind_role(cluster, namespace, "towline-log-reader", users=("carol",))
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_kept_workflow(namespace)))
        for number in range(1, 5):
            name = start_run(cluster, namespace, "deploy-prod", f"deploy-{number}", user="carol")
            approval = step_status(wait_for_phase(cluster, namespace, name, {"AwaitingApproval"}, timeout=300),
                                   "review")["approvalName"]
            decision = {"spec": {"decision": "Approved", "decidedBy": "bob", "reason": f"change 47{number}"}}
            cluster.kubectl("patch", "approval", approval, "-n", namespace, "--type", "merge",
                            "-p", json.dumps(decision), user="bob")
            assert wait_for_phase(cluster, namespace, name, {"Succeeded", "Failed"},
                                  timeout=300)["status"]["phase"] == "Succeeded"
        wait_for("the history limit to prune deploy-1 (once the archive has written it)", lambda: cluster.kubectl(
            "get", "workflowruns.towline.dev", "deploy-1", "-n", namespace, check=False).returncode != 0, timeout=180)
        wait_for("deploy-1's pods to go with it", lambda: not json.loads(cluster.kubectl(
            "get", "pods", "-n", namespace, "-l", "towline.dev/run=deploy-1", "-o", "json").stdout)["items"],
            timeout=180)
        cluster.kubectl("rollout", "restart", "deployment/towline-operator", "deployment/towline-archive",
                        "-n", NAMESPACE)
        wait_rolled_out(cluster)

        listed = wait_for("deploy-1 in the archive after the restarts", lambda: next((
            item for item in json.loads(towline(cluster, namespace, "history", "-o", "json").stdout
                                        or '{"items": []}').get("items", [])
            if item["metadata"]["name"] == "deploy-1"), None), timeout=120)
        assert listed["approvers"] == ["bob"] and listed["phase"] == "Succeeded", listed
        assert "change 471" in json.dumps(listed["record"]["approvals"]), "the decision's reason is kept"
        log = towline(cluster, namespace, "logs", "deploy-1", "apply")
        assert log.returncode == 0 and log.stdout.strip(), log.stdout + log.stderr

        refused = cluster.kubectl("get", "archivedruns.archive.towline.dev", "-n", namespace, user="alice",
                                  check=False)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stdout + refused.stderr
        assert "deploy-1" not in towline(cluster, namespace, "history", user="alice").stdout
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
