"""A compromised operator, acting with the operator ServiceAccount's own token: it may create Jobs in every
namespace it watches and read pods (their termination messages), but not Secrets. Through a Job of its own
design it could read any Secret anyway, or act as any ServiceAccount; the chart's policy towline-step-objects
admits only step-shaped Jobs (towline.k8s.stepjobs.build_step_job) of the runner image, and none in kube-system
or the operator's own namespace; a user step type's Job runs the runner's `prepare` and then one container of an
image under stepTypes.allowedImagePrefixes, nothing else. It also creates each step Job's one pod
(towline.k8s.steppods: the Job is `managedBy` the operator, so the Job controller makes none): a pod of its own
design would be the same escape, so its pods are held to the same shape and must be named as, labelled and
controlled as a step Job's. Each escape is refused while a real run's step Jobs still run."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.integration.attacks.attack_support import (
    AsOperator,
    create_as,
    echo_workflow,
    install,
    refused,
    run_manifest,
)
from tests.integration.support import create, wait_for, wait_for_phase

from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.engine import job_name
from towline.engine.traces import traced_run
from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import BuiltinAction, StepTypeImage, build_step_job
from towline.k8s.steppods import build_step_pod
from towline.validation.catalog import connector_catalog
from towline_dev.controlplane import ControlPlane
from towline_dev.images import RUNNER_IMAGE
from towline_dev.install import OPERATOR_NAMESPACE
from towline_dev.node.nodeimages import TEST_IMAGE

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

CANARY = "crown-jewels-4b1d9e-do-not-leak"
STEP_SHAPE = "a Job of the Towline operator is a step Job"
IMAGES = "a step Job runs only the images the chart allows"
CONTAINERS = "a step Job's containers run the runner"
ACCOUNT = "a step Job's pod runs as the namespace's default ServiceAccount"
VOLUMES = "a step Job's pod mounts only emptyDir volumes, Secret volumes with optional: true"
HOST = "a step Job's pod uses no host network, PID or IPC namespace"
RESTRICTED = "a step Job's pod has the restricted security context"
EXCLUDED = "the Towline operator may not create, change or delete Jobs, pods or NetworkPolicies in namespace"

def step_job(namespace: str, *, traced: bool = False) -> dict[str, Any]:
    """A Job exactly as the operator builds one, mounting the namespace's Secret `crown-jewels`."""
    uid = "00000000-0000-0000-0000-000000000019"
    trace = traced_run({"uid": uid, "name": "victim-run", "namespace": namespace}, workflow="wf",
                       trigger="manual") if traced else None
    run = RunRef(name="victim-run", namespace=namespace, uid=uid, workflow="wf", trace=trace)
    return build_step_job(
        run, BuiltinAction(connector_catalog()),
        job_name=job_name(run.name, "call", 1), step_id="call", attempt=1, action="http.request",
        inputs={"url": "https://example.com/"}, credentials={"api": "crown-jewels"}, idempotency_key="k",
        timeout_seconds=60, settings=StepPodSettings(image=RUNNER_IMAGE),
    )


def test_a_compromised_operator_cannot_read_a_secret_through_a_job_of_its_own(
    towline_installed: ControlPlane, namespace: str, as_operator: AsOperator,
) -> None:
    cluster, ns = towline_installed, namespace
    cluster.kubectl("create", "secret", "generic", "crown-jewels", "-n", ns, f"--from-literal=token={CANARY}")
    assert as_operator("get", "secret", "crown-jewels", "-n", ns).returncode != 0, "RBAC: no Secret for the operator"
    job = step_job(ns)
    job["metadata"] = {"name": "exfiltrate", "namespace": ns}
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["python3", "-c", "import shutil; shutil.copy("
                            "'/var/run/towline/credentials/api/token', '/dev/termination-log')"]
    job["spec"]["template"]["metadata"] = {}

    created = as_operator.create(job)
    if created.returncode == 0:  # without the policy: read back what the Job's pod found, as the operator may
        def message() -> str | None:
            pods = json.loads(as_operator("get", "pods", "-n", ns, "-l", "job-name=exfiltrate", "-o", "json").stdout)
            for pod in pods["items"]:
                for status in (pod.get("status") or {}).get("containerStatuses") or []:
                    terminated = (status.get("state") or {}).get("terminated")
                    if terminated:
                        return str(terminated.get("message"))
            return None

        assert CANARY not in wait_for("the exfiltrating pod to finish", message, timeout=180), \
            "the operator read the Secret's value from its own Job's termination message"
    refused(created, STEP_SHAPE)


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def _container(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = _pod(job)["containers"][0]
    return container


ESCAPES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    # (A Job with no labels at all gets its template's: the API server's defaulting copies them.)
    "labelled-as-no-run": (lambda j: j["metadata"].update(labels={"app": "mine"}), STEP_SHAPE),
    "pod-template-unlabelled": (lambda j: j["spec"]["template"].pop("metadata"), STEP_SHAPE),
    "not-named-as-a-step": (lambda j: j["metadata"].update(name="anything-1"), STEP_SHAPE),
    "owned-by-nothing": (lambda j: j["metadata"].pop("ownerReferences"), STEP_SHAPE),
    "another-image": (lambda j: _container(j).update(image=TEST_IMAGE), IMAGES),
    "the-runner-image-running-other-code": (
        lambda j: _container(j).update(command=["python3", "-c", "print(open('/etc/hostname').read())"]), CONTAINERS),
    "extra-args": (lambda j: _container(j).update(args=["--debug"]), CONTAINERS),
    "a-secret-in-the-environment": (lambda j: _container(j)["env"].append(
        {"name": "TOWLINE_X", "valueFrom": {"secretKeyRef": {"name": "crown-jewels", "key": "token"}}}), CONTAINERS),
    "env-from-a-secret": (lambda j: _container(j).update(envFrom=[{"secretRef": {"name": "crown-jewels"}}]),
                          CONTAINERS),
    "python-environment": (lambda j: _container(j)["env"].append({"name": "PYTHONWARNINGS", "value": "x"}),
                           CONTAINERS),
    # TRACEPARENT is the one name outside TOWLINE_ (a traced run's attempt span): 55 characters, never a reference.
    "a-traceparent-carrying-more-than-a-span": (lambda j: _container(j)["env"].append(
        {"name": "TRACEPARENT", "value": "00-" + "a" * 32 + "-" + "b" * 16 + "-01;" + "x" * 200}), CONTAINERS),
    "a-traceparent-from-a-secret": (lambda j: _container(j)["env"].append(
        {"name": "TRACEPARENT", "valueFrom": {"secretKeyRef": {"name": "crown-jewels", "key": "token"}}}), CONTAINERS),
    "post-start-hook": (lambda j: _container(j).update(
        lifecycle={"postStart": {"exec": {"command": ["python3", "-c", "1"]}}}), CONTAINERS),
    "exec-probe": (lambda j: _container(j).update(livenessProbe={"exec": {"command": ["python3", "-c", "1"]}}),
                   CONTAINERS),
    "host-port": (lambda j: _container(j).update(ports=[{"containerPort": 80, "hostPort": 80}]), CONTAINERS),
    # With an init container the Job takes a step type's shape, whose `step` container is never the runner's image.
    "init-container": (lambda j: _pod(j).update(initContainers=[{**copy.deepcopy(_container(j)), "name": "i"}]),
                       IMAGES),
    "a-privileged-service-account": (lambda j: _pod(j).update(serviceAccountName="cluster-admin-sa"), ACCOUNT),
    "a-service-account-token": (lambda j: _pod(j).update(automountServiceAccountToken=True), ACCOUNT),
    "host-path": (lambda j: _pod(j)["volumes"].append({"name": "root", "hostPath": {"path": "/"}}), VOLUMES),
    "projected-token": (lambda j: _pod(j)["volumes"].append({"name": "t", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "audience": "vault"}}]}}), VOLUMES),
    # A code.wasm step mounts one optional key as `module`; a whole ConfigMap, or a key elsewhere, is refused.
    "a-whole-config-map": (lambda j: _pod(j)["volumes"].append({"name": "c", "configMap": {
        "name": "team-config", "optional": True}}), VOLUMES),
    "a-config-map-key-as-another-file": (lambda j: _pod(j)["volumes"].append({"name": "c", "configMap": {
        "name": "team-config", "optional": True, "items": [{"key": "settings", "path": "settings"}]}}), VOLUMES),
    "host-network": (lambda j: _pod(j).update(hostNetwork=True), HOST),
    "host-pid": (lambda j: _pod(j).update(hostPID=True), HOST),
    "pinned-to-a-node": (lambda j: _pod(j).update(nodeName="control-plane-1"), HOST),
    # Only stepPods.priorityClassName (none in the tests' chart): another class would preempt the cluster's pods.
    "a-priority-class-that-preempts": (lambda j: _pod(j).update(priorityClassName="system-node-critical"), HOST),
    "privilege-escalation": (lambda j: _container(j)["securityContext"].update(allowPrivilegeEscalation=True),
                             RESTRICTED),
    "added-capability": (lambda j: _container(j)["securityContext"].update(
        capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}), RESTRICTED),
    "root": (lambda j: _container(j)["securityContext"].update(runAsUser=0, runAsNonRoot=False), RESTRICTED),
    "writable-root-filesystem": (lambda j: _container(j)["securityContext"].update(readOnlyRootFilesystem=False),
                                 RESTRICTED),
    "unconfined-seccomp": (lambda j: _pod(j)["securityContext"].update(seccompProfile={"type": "Unconfined"}),
                           RESTRICTED),
}


STEP_TYPE_IMAGE = "localhost/towline-steps/tcp-probe:dev"


def user_step_job(namespace: str) -> dict[str, Any]:
    """A user step type's Job exactly as the operator builds one (runner `prepare`, then the type's container)."""
    run = RunRef(name="victim-run", namespace=namespace, uid="00000000-0000-0000-0000-000000000019", workflow="wf")
    step_type = ResolvedStepType(kind="StepType", name="probe", spec=StepTypeSpec(image=STEP_TYPE_IMAGE))
    return build_step_job(
        run, StepTypeImage(step_type), job_name=job_name(run.name, "probe", 1), step_id="probe", attempt=1,
        action="steptype/probe", inputs={}, credentials={}, idempotency_key="k", timeout_seconds=60,
        settings=StepPodSettings(image=RUNNER_IMAGE),
    )


def _prepare(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = _pod(job)["initContainers"][0]
    return container


USER_STEP_ESCAPES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "a-step-type-container-outside-the-allowed-prefixes": (lambda j: _container(j).update(image=TEST_IMAGE), IMAGES),
    "a-prepare-of-another-image": (lambda j: _prepare(j).update(image=STEP_TYPE_IMAGE), IMAGES),
    "a-prepare-running-other-code": (lambda j: _prepare(j).update(args=["-c", "print(1)"]), CONTAINERS),
    "a-prepare-that-keeps-running-as-a-sidecar": (lambda j: _prepare(j).update(restartPolicy="Always"), CONTAINERS),
    # Refused first by the image rule: in a step type's shape every container but `step` runs no image at all.
    "a-second-container": (lambda j: _pod(j)["containers"].append({**copy.deepcopy(_container(j)), "name": "second"}),
                           IMAGES),
    "a-user-container-with-a-secret-in-its-environment": (lambda j: _container(j).update(
        envFrom=[{"secretRef": {"name": "crown-jewels"}}]), CONTAINERS),
    "a-user-container-with-a-capability": (lambda j: _container(j)["securityContext"].update(
        capabilities={"drop": ["ALL"], "add": ["NET_RAW"]}), RESTRICTED),
    "a-prepare-with-a-writable-root": (lambda j: _prepare(j)["securityContext"].update(readOnlyRootFilesystem=False),
                                       RESTRICTED),
}


def test_a_step_types_job_as_the_operator_builds_it_is_admitted(
    towline_installed: ControlPlane, dry_run_namespace: str, as_operator: AsOperator,
) -> None:
    created = as_operator.create(user_step_job(dry_run_namespace), dry_run=True)
    assert created.returncode == 0, created.stderr


@pytest.mark.parametrize("escape", list(USER_STEP_ESCAPES))
def test_a_step_types_job_admits_no_other_shape(
    towline_installed: ControlPlane, dry_run_namespace: str, as_operator: AsOperator, escape: str,
) -> None:
    job = user_step_job(dry_run_namespace)
    mutate, reason = USER_STEP_ESCAPES[escape]
    mutate(job)
    refused(as_operator.create(job, dry_run=True), reason)


def test_a_traced_runs_step_job_is_admitted_with_its_traceparent(
    towline_installed: ControlPlane, dry_run_namespace: str, as_operator: AsOperator,
) -> None:
    job = step_job(dry_run_namespace, traced=True)
    assert any(item["name"] == "TRACEPARENT" for item in _container(job)["env"])
    created = as_operator.create(job, dry_run=True)
    assert created.returncode == 0, created.stderr


@pytest.mark.parametrize("escape", list(ESCAPES))
def test_the_operator_may_create_only_step_shaped_jobs(
    towline_installed: ControlPlane, dry_run_namespace: str, as_operator: AsOperator, escape: str,
) -> None:
    job = step_job(dry_run_namespace)
    mutate, reason = ESCAPES[escape]
    mutate(job)
    refused(as_operator.create(job, dry_run=True), reason)


@pytest.mark.parametrize("where", ["kube-system", OPERATOR_NAMESPACE])
def test_the_operator_reaches_nothing_in_kube_system_or_its_own_namespace(
    towline_installed: ControlPlane, as_operator: AsOperator, where: str,
) -> None:
    job = step_job(where)
    refused(as_operator.create(job, dry_run=True), f"{EXCLUDED} {where}")
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "towline-steps-default-deny", "namespace": where},
              "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    refused(as_operator.create(policy, dry_run=True), f"{EXCLUDED} {where}")


@pytest.mark.parametrize("where", ["kube-system", OPERATOR_NAMESPACE])
def test_the_operator_deletes_nothing_in_kube_system_or_its_own_namespace(
    towline_installed: ControlPlane, as_operator: AsOperator, where: str,
) -> None:
    """Elsewhere a deletion by the operator skips the policy's checks (its match conditions); not here."""
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "towline-attack-deletion-probe", "namespace": where},
              "spec": {"podSelector": {"matchLabels": {"towline.dev/probe": "none"}}, "policyTypes": ["Ingress"]}}
    towline_installed.kubectl("apply", "-f", "-", stdin=json.dumps(policy))
    try:
        refused(as_operator("delete", "networkpolicy", "towline-attack-deletion-probe", "-n", where,
                            "--dry-run=server"), f"{EXCLUDED} {where}")
    finally:
        towline_installed.kubectl("delete", "networkpolicy", "towline-attack-deletion-probe", "-n", where)


POD_SHAPE = "a pod of the Towline operator is a step Job's pod"


@pytest.fixture(scope="module")
def pods_namespace(towline_installed: ControlPlane, dry_run_namespace: str) -> str:
    """`dry_run_namespace` with the ServiceAccount `cluster-admin-sa` the escapes name: a pod naming one that does
    not exist is refused before any policy."""
    create(towline_installed, {"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": "cluster-admin-sa", "namespace": dry_run_namespace}})
    return dry_run_namespace


def step_pod(namespace: str, job: dict[str, Any] | None = None) -> dict[str, Any]:
    """The pod the operator makes for `job` (default: `step_job`) once the API server stored it (a uid)."""
    job = copy.deepcopy(job or step_job(namespace))
    job["metadata"]["uid"] = "00000000-0000-0000-0000-000000000020"
    return build_step_pod(job)


POD_ESCAPES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "unlabelled": (lambda p: p["metadata"].update(labels={"app": "mine"}), POD_SHAPE),
    "not-a-step-pod": (lambda p: p["metadata"]["labels"].pop("towline.dev/step-pod"), POD_SHAPE),
    "not-named-as-a-step": (lambda p: p["metadata"].update(name="anything-1"), POD_SHAPE),
    "owned-by-nothing": (lambda p: p["metadata"].pop("ownerReferences"), POD_SHAPE),
    "owned-by-a-job-of-another-name": (lambda p: p["metadata"]["ownerReferences"][0].update(name="other"), POD_SHAPE),
    "owned-by-a-run-not-a-job": (lambda p: p["metadata"]["ownerReferences"][0].update(
        kind="WorkflowRun", apiVersion="towline.dev/v1alpha1"), POD_SHAPE),
}


def test_the_operators_step_pod_as_it_builds_it_is_admitted(
    towline_installed: ControlPlane, dry_run_namespace: str, as_operator: AsOperator,
) -> None:
    created = as_operator.create(step_pod(dry_run_namespace), dry_run=True)
    assert created.returncode == 0, created.stderr


@pytest.mark.parametrize("escape", [*POD_ESCAPES, *(name for name, (_, reason) in ESCAPES.items()
                                                    if reason != STEP_SHAPE)])
def test_the_operator_may_create_only_step_shaped_pods(
    towline_installed: ControlPlane, pods_namespace: str, as_operator: AsOperator, escape: str,
) -> None:
    """Every escape of a Job's pod template is refused on the pod too (the same rules read the pod's spec), and a
    pod must be a step Job's by name, labels and controller."""
    if escape in POD_ESCAPES:
        pod = step_pod(pods_namespace)
        mutate, reason = POD_ESCAPES[escape]
        mutate(pod)
    else:
        job = step_job(pods_namespace)
        mutate, reason = ESCAPES[escape]
        mutate(job)
        pod = step_pod(pods_namespace, job)
    refused(as_operator.create(pod, dry_run=True), reason)


def test_the_operators_pods_reach_nothing_in_kube_system(
    towline_installed: ControlPlane, as_operator: AsOperator,
) -> None:
    refused(as_operator.create(step_pod("kube-system"), dry_run=True),
            f"{EXCLUDED} kube-system")


def test_a_real_runs_step_pods_are_the_operators_and_still_run(
    towline_operator: Any, towline_installed: ControlPlane, namespace: str, as_operator: AsOperator,
) -> None:
    """The control for the refusals above: a real run's step pod, made by the operator under the policy; and the
    operator, which may patch pods only to remove its finalizer, changes no pod's spec (its image)."""
    cluster, ns = towline_installed, namespace
    install(cluster, echo_workflow(ns))
    assert create_as(cluster, "admin", run_manifest(ns, "echo", "real-run", "admin")).returncode == 0
    run = wait_for_phase(cluster, ns, "real-run", {"Succeeded", "Failed"})
    assert run["status"]["phase"] == "Succeeded", run["status"]
    [job_name_] = [step["jobName"] for step in run["status"]["steps"]]
    pod = json.loads(cluster.kubectl("get", "pod", job_name_, "-n", ns, "-o", "json").stdout)
    assert [(o["kind"], o["name"], o["controller"]) for o in pod["metadata"]["ownerReferences"]] == [
        ("Job", job_name_, True)]
    job = json.loads(cluster.kubectl("get", "job", job_name_, "-n", ns, "-o", "json").stdout)
    assert job["spec"]["managedBy"] == "towline.dev/operator"
    assert {c["type"] for c in job["status"]["conditions"] if c["status"] == "True"} == {
        "SuccessCriteriaMet", "Complete"}, "the operator recorded the pod's end on its Job"
    assert "finalizers" not in pod["metadata"], "let go once its end was written"
    swap = json.dumps({"spec": {"containers": [{"name": "step", "image": TEST_IMAGE}]}})
    refused(as_operator("patch", "pod", job_name_, "-n", ns, "--type", "strategic", "-p", swap),
            "the Towline operator changes nothing of a pod but its metadata")
