"""`helm install`, `helm upgrade`, `helm uninstall` and `helm test` of the chart, on a real API server.

The release lives in a control plane of its own (started for this module), because the
session's control plane holds the chart's cluster-scoped objects applied by kubectl,
which Helm will not adopt. With `TOWLINE_TEST_KUBECONFIG` the module uses that cluster.

The tests that need running pods (`helm test`, the README's approval walkthrough against
the Helm-installed operator) install the release on the session's real node instead
(`real_node_with_images`: the operator and runner images loaded into its containerd), where
the operator, the ingress and the step Jobs run as real containers; meanwhile the session's
own operator is stopped and its kubectl-applied chart objects removed (`chart_left_to_helm`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.helmsupport import find, helm, render, set_args
from tests.integration.support import bind_role, start_run, step_status, wait_for, wait_for_phase

from towline.k8s.objects import LABEL_STEP
from towline_dev.binaries import BinarySet
from towline_dev.controlplane import ControlPlane
from towline_dev.existing import ExistingCluster
from towline_dev.install import CHART, OperatorProcess, operator_kubeconfig
from towline_dev.node.realnode import NodeCluster
from towline_dev.processes import free_loopback_port

pytestmark = pytest.mark.integration

Cluster = ControlPlane | ExistingCluster
RELEASE = "towline"
NAMESPACE = "towline-system"
CHART_LABELS = ("app.kubernetes.io/instance=towline", "app.kubernetes.io/name=towline",
                "app.kubernetes.io/part-of=towline")


def image_values() -> dict[str, str]:
    """The images `make dev` loads into the local node; on an existing cluster, the ones you pushed."""
    return {
        "image.repository": os.environ.get("TOWLINE_TEST_IMAGE_REPOSITORY", "localhost/towline"),
        "image.tag": os.environ.get("TOWLINE_TEST_IMAGE_TAG", "dev"),
        "runner.image": os.environ.get("TOWLINE_TEST_RUNNER_IMAGE", "localhost/towline-runner:dev"),
    }


@pytest.fixture(scope="module")
def helm_cluster(k8s_binaries: BinarySet, existing_cluster: ExistingCluster | None) -> Iterator[Cluster]:
    if existing_cluster is not None:
        yield existing_cluster
        return
    plane = ControlPlane(k8s_binaries, install_signal_handlers=False).start()
    try:
        yield plane
    finally:
        plane.remove_state()


def on(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return helm(cluster.binaries, *args, kubeconfig=cluster.kubeconfig)


def install(cluster: Cluster, release: str, namespace: str, values: dict[str, str]) -> None:
    result = on(cluster, "install", release, str(CHART), "--namespace", namespace, "--create-namespace",
                *set_args({**image_values(), **values}))
    assert result.returncode == 0, result.stdout + result.stderr


def uninstall(cluster: Cluster, release: str, namespace: str) -> None:
    result = on(cluster, "uninstall", release, "--namespace", namespace, "--ignore-not-found")
    assert result.returncode == 0, result.stdout + result.stderr


def deployment(cluster: Cluster, namespace: str = NAMESPACE) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        cluster.kubectl("get", "deployment", "towline-operator", "-n", namespace, "-o", "json").stdout)
    return found


def container_env(found: dict[str, Any]) -> dict[str, str]:
    (container,) = found["spec"]["template"]["spec"]["containers"]
    return {v["name"]: v.get("value", "") for v in container["env"]}


def labelled_objects(cluster: Cluster, label: str) -> list[tuple[str, str]]:
    """(kind, namespace/name) of every object of every listable kind carrying `label`."""
    kinds = cluster.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    listed = cluster.kubectl("get", ",".join(kinds), "--all-namespaces", "-l", label, "-o", "json",
                             check=False, timeout=120)
    items = json.loads(listed.stdout or '{"items": []}')["items"]
    assert listed.returncode == 0 or items, listed.stderr
    return sorted((i["kind"], f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}") for i in items)


@pytest.fixture(scope="module")
def installed(helm_cluster: Cluster) -> Cluster:
    # Pod Security "restricted" enforced where the chart installs: its pods must pass it.
    helm_cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    helm_cluster.kubectl("label", "namespace", NAMESPACE, "--overwrite",
                         "pod-security.kubernetes.io/enforce=restricted")
    install(helm_cluster, RELEASE, NAMESPACE, {})
    return helm_cluster


def test_helm_install_establishes_the_crds_and_creates_every_object(installed: Cluster) -> None:
    status = json.loads(on(installed, "status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    installed.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                      "crd/workflows.towline.dev", "crd/workflowruns.towline.dev", "crd/approvals.towline.dev")
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


def test_helm_upgrade_with_a_changed_value_rolls_the_operator(installed: Cluster) -> None:
    before = deployment(installed)
    old_checksum = before["spec"]["template"]["metadata"]["annotations"]["towline.dev/config-checksum"]
    result = on(installed, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values",
                "--set", "operator.logLevel=debug")
    assert result.returncode == 0, result.stdout + result.stderr
    after = deployment(installed)
    assert after["spec"]["template"]["metadata"]["annotations"]["towline.dev/config-checksum"] != old_checksum
    assert container_env(after)["TOWLINE_LOG_LEVEL"] == "debug"

    def replica_sets() -> list[dict[str, Any]] | None:
        listed = json.loads(installed.kubectl(
            "get", "replicasets", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator", "-o", "json",
        ).stdout)["items"]
        rolled = [rs for rs in listed
                  if container_env(rs).get("TOWLINE_LOG_LEVEL") == "debug"]
        return listed if rolled and len(listed) >= 2 else None

    # The Deployment controller itself starts the rollout: a new ReplicaSet with the new pod template.
    sets = wait_for("a new ReplicaSet for the changed pod template", replica_sets, timeout=60)
    hashes = {rs["metadata"]["labels"]["pod-template-hash"] for rs in sets}
    assert len(hashes) == len(sets) >= 2


def test_helm_uninstall_leaves_nothing_but_the_crds(installed: Cluster) -> None:
    uninstall(installed, RELEASE, NAMESPACE)

    remaining: list[tuple[str, str]] = []

    def leftovers() -> list[tuple[str, str]] | None:
        found = [o for label in CHART_LABELS for o in labelled_objects(installed, label)]
        remaining[:] = [o for o in found if o[0] != "CustomResourceDefinition"]
        # ReplicaSets and pods go with their Deployment through the garbage collector, a moment later.
        return None if remaining else found

    try:
        found = wait_for("everything of the release but the CRDs to be gone", leftovers, timeout=90)
    except AssertionError:
        raise AssertionError(f"left behind by helm uninstall: {remaining}") from None
    assert sorted(name for kind, name in found if kind == "CustomResourceDefinition") == [
        "/approvals.towline.dev", "/workflowruns.towline.dev", "/workflows.towline.dev"]
    assert on(installed, "status", RELEASE, "-n", NAMESPACE).returncode != 0


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
    helm_cluster: Cluster, tmp_path: Path
) -> None:
    cluster, release_namespace = helm_cluster, "towline-scoped"
    uninstall(cluster, RELEASE, NAMESPACE)  # cluster-scoped names are one per cluster
    for namespace in ("watched", "unwatched"):
        cluster.kubectl("create", "namespace", namespace, check=False)
    install(cluster, "scoped", release_namespace, {"watchNamespaces": '["watched"]'})
    operator: OperatorProcess | None = None
    try:
        kubeconfig = operator_kubeconfig(cluster, tmp_path / "operator.kubeconfig", namespace=release_namespace)
        # The operator is told what to watch exactly as the chart's Deployment tells it.
        told = container_env(deployment(cluster, release_namespace))["TOWLINE_WATCH_NAMESPACES"]
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


def ready_nodes(cluster: Cluster) -> list[str]:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return [n["metadata"]["name"] for n in nodes if any(
        c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions", []))]


def api_server_egress(cluster: Cluster) -> dict[str, str]:
    """networkPolicy.apiServer narrowed to where this cluster's API server really is (what pods reach
    behind the `kubernetes` Service), as the README tells users to set it; {} (the chart's defaults)
    when it publishes no address, as an API server advertised on loopback does."""
    slices = json.loads(cluster.kubectl("get", "endpointslices", "-n", "default", "-l",
                                        "kubernetes.io/service-name=kubernetes", "-o", "json").stdout)["items"]
    addresses = sorted({a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]})
    ports = sorted({p["port"] for s in slices for p in s.get("ports") or []})
    if not (addresses and ports):
        return {}
    cidrs = [f"{a}/128" if ":" in a else f"{a}/32" for a in addresses]
    return {"networkPolicy.apiServer.cidrs": json.dumps(cidrs), "networkPolicy.apiServer.ports": json.dumps(ports)}


@pytest.fixture(scope="module")
def node_cluster(request: pytest.FixtureRequest, helm_cluster: Cluster) -> Cluster:
    """Where the operator's pods can run: `helm_cluster` if it has a Ready node (an existing cluster),
    else the session's local real node with the images loaded into its containerd."""
    if ready_nodes(helm_cluster):
        return helm_cluster
    if isinstance(helm_cluster, ExistingCluster):
        pytest.skip("needs a Ready node to run the operator's pods, and TOWLINE_TEST_KUBECONFIG's cluster has none")
    if os.geteuid() != 0:
        pytest.skip("needs a Ready node to run the operator's pods: the local real node needs root; or run it "
                    "against a cluster with a node and the images: TOWLINE_TEST_KUBECONFIG=<kubeconfig> "
                    "TOWLINE_TEST_IMAGE_REPOSITORY=<registry>/towline TOWLINE_TEST_IMAGE_TAG=<tag> "
                    "TOWLINE_TEST_RUNNER_IMAGE=<registry>/towline-runner:<tag> "
                    "python -m pytest tests/integration/test_helm_lifecycle.py")
    real: NodeCluster = request.getfixturevalue("real_node_with_images")
    assert real.plane is not None
    return request.getfixturevalue("chart_left_to_helm")  # the session's plane, its operator stopped


def wait_rolled_out(cluster: Cluster, namespace: str = NAMESPACE) -> None:
    """Every Deployment of the release rolled out: its new pods Ready as real containers."""
    names = cluster.kubectl("get", "deployments", "-n", namespace, "-l", "app.kubernetes.io/instance=towline",
                            "-o", "name").stdout.split()
    assert "deployment.apps/towline-operator" in names, names
    for name in names:
        rollout = cluster.kubectl("rollout", "status", name, "-n", namespace, "--timeout=300s",
                                  check=False, timeout=320)
        assert rollout.returncode == 0, rollout.stdout + rollout.stderr + describe(cluster, namespace)


def describe(cluster: Cluster, namespace: str) -> str:
    pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
    events = cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False).stdout
    return f"\n{pods}\n{events[-4000:]}"


@pytest.fixture
def running_release(node_cluster: Cluster) -> Iterator[Cluster]:
    """The chart installed and its Deployments rolled out (pods running on a real node)."""
    cluster = node_cluster
    uninstall(cluster, RELEASE, NAMESPACE)
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    cluster.kubectl("label", "namespace", NAMESPACE, "--overwrite", "pod-security.kubernetes.io/enforce=restricted")
    install(cluster, RELEASE, NAMESPACE, api_server_egress(cluster))
    try:
        wait_rolled_out(cluster)
        yield cluster
    finally:
        uninstall(cluster, RELEASE, NAMESPACE)


def test_helm_test_passes_against_the_running_operator(running_release: Cluster) -> None:
    result = on(running_release, "test", RELEASE, "-n", NAMESPACE, "--timeout", "5m")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"TEST SUITE:\s+towline-test-operator\s.*Phase:\s+Succeeded", result.stdout, re.S), result.stdout
    # The passed test pod is deleted (hook-succeeded), so `helm uninstall` will leave nothing behind.
    left = running_release.kubectl("get", "pod", "towline-test-operator", "-n", NAMESPACE, check=False)
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


def test_readme_approval_walkthrough_against_the_helm_installed_operator(running_release: Cluster) -> None:
    cluster, namespace = running_release, "towline-walkthrough"
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


def test_helm_upgrade_rolls_new_ready_pods_and_uninstall_leaves_only_crds_on_a_node(
    running_release: Cluster,
) -> None:
    cluster = running_release
    before = {p["metadata"]["name"] for p in _chart_pods(cluster)}
    result = on(cluster, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values",
                "--set", "operator.logLevel=debug")
    assert result.returncode == 0, result.stdout + result.stderr
    wait_rolled_out(cluster)

    def rolled() -> list[dict[str, Any]] | None:
        pods = _chart_pods(cluster, "app.kubernetes.io/component=operator")
        # The old pods terminate after the new ones are Ready; wait until only new ones are left.
        return pods if len(pods) == 2 and not {p["metadata"]["name"] for p in pods} & before else None

    pods = wait_for("the operator's pods to be replaced", rolled, timeout=120)
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert {"name": "TOWLINE_LOG_LEVEL", "value": "debug"} in container["env"]
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"]), pod["status"]

    uninstall(cluster, RELEASE, NAMESPACE)
    remaining: list[tuple[str, str]] = []

    def leftovers() -> list[tuple[str, str]] | None:
        found = [o for label in CHART_LABELS for o in labelled_objects(cluster, label)]
        remaining[:] = [o for o in found if o[0] != "CustomResourceDefinition"]
        return None if remaining or _chart_pods(cluster, terminating=True) else found

    try:
        found = wait_for("everything of the release but the CRDs to be gone, pods included", leftovers, timeout=180)
    except AssertionError:
        raise AssertionError(f"left behind by helm uninstall: {remaining}") from None
    assert {kind for kind, _ in found} == {"CustomResourceDefinition"}


def _chart_pods(cluster: Cluster, selector: str = "app.kubernetes.io/name=towline", *,
                terminating: bool = False) -> list[dict[str, Any]]:
    listed = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json")
    pods: list[dict[str, Any]] = [
        p for p in json.loads(listed.stdout)["items"] if terminating or not p["metadata"].get("deletionTimestamp")]
    return pods


CANARY = "canary-4b1e8d-never-in-a-log"


def test_canary_secret_value_is_in_no_container_log_of_the_helm_installed_run(running_release: Cluster) -> None:
    """A step mounts a Secret holding a canary; its value appears in no container's `kubectl logs`
    (operator, ingress, step), nor in the run's status or the events, and only in its Secret."""
    cluster, namespace = running_release, "towline-canary"
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
