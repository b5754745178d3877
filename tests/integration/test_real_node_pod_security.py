"""Pod Security `restricted` on a real node, and a step pod as the operator builds it, seen from inside.

The step Job comes from the operator's own builder (`build_step_job`) with only the
image swapped for the busybox test image, in a namespace that enforces `restricted`:
that it runs at all shows the operator's pod spec passes; inside, it runs as a
non-root uid on a read-only root, has no ServiceAccount token, and sees only the
Secret its step names, and of it only the key its step reads.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.nodesupport import create, create_step_job, exec_in, sleeper_pod, wait_running
from tests.integration.support import bind_role, wait_for

from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.validation.catalog import connector_catalog
from towline_dev.controlplane import ControlPlane
from towline_dev.node.nodeimages import TEST_IMAGE
from towline_dev.node.realnode import NodeCluster
from towline_step.protocol import DEFAULT_CREDENTIALS_DIR

NAMESPACE = "psa-restricted"
CANARY = "canary-7f3a9c-never-log-me"
ADMIN_CANARY = "admin-canary-2b8e41-not-for-this-step"


@pytest.fixture(scope="module")
def plane(real_node: NodeCluster) -> Iterator[ControlPlane]:
    plane = real_node.plane
    assert plane is not None
    create(plane, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
    }}})
    # alice may manage pods here (RBAC), so only Pod Security stands between her and a root pod.
    bind_role(plane, NAMESPACE, "edit", users=("alice",))
    for name, value in (("api-token", CANARY), ("unrelated", CANARY + "-unrelated")):
        plane.kubectl("create", "secret", "generic", name, f"--from-literal=token={value}", "-n", NAMESPACE)
    # A second key of the step's own Secret, which the step does not read.
    plane.kubectl("patch", "secret", "api-token", "-n", NAMESPACE, "--type", "merge",
                  "-p", json.dumps({"stringData": {"admin-token": ADMIN_CANARY}}))
    yield plane
    plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found", check=False)


def _with(pod: dict[str, Any], **container_security: Any) -> dict[str, Any]:
    pod["spec"]["containers"][0]["securityContext"].update(container_security)
    return pod


@pytest.mark.parametrize(
    "attack", ["root", "host-network", "privilege-escalation", "added-capability", "unconfined-seccomp"]
)
def test_restricted_namespace_refuses_alice_a_weaker_pod(plane: ControlPlane, attack: str) -> None:
    pod = sleeper_pod(f"attack-{attack}", NAMESPACE)
    if attack == "root":
        pod["spec"]["securityContext"].update(runAsNonRoot=False, runAsUser=0)
        _with(pod, runAsNonRoot=False)
    elif attack == "host-network":
        pod["spec"]["hostNetwork"] = True
    elif attack == "privilege-escalation":
        _with(pod, allowPrivilegeEscalation=True)
    elif attack == "added-capability":
        _with(pod, capabilities={"drop": ["ALL"], "add": ["NET_RAW"]})
    else:
        _with(pod, seccompProfile={"type": "Unconfined"})
    result = create(plane, pod, user="alice", check=False)
    assert result.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in result.stderr


def test_alice_may_create_a_compliant_pod(plane: ControlPlane) -> None:
    """The control for the refusals above: RBAC lets her, so they were Pod Security's."""
    result = create(plane, sleeper_pod("compliant", NAMESPACE), user="alice", check=False)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def step_pod(plane: ControlPlane) -> str:
    run = RunRef(name="run-1", namespace=NAMESPACE, uid="00000000-0000-0000-0000-000000000002", workflow="wf")
    job = build_step_job(
        run, BuiltinAction(connector_catalog()),
        job_name="run-1-fetch-1", step_id="fetch", attempt=1, action="http.request",
        inputs={"url": "https://api.example.com/", "auth": {"bearer": {"credential": "api", "key": "token"}}},
        credentials={"api": "api-token"}, idempotency_key="k", timeout_seconds=600,
        settings=StepPodSettings(image=TEST_IMAGE, command=("/bin/busybox", "sleep", "600")),
    )
    del job["metadata"]["ownerReferences"]  # no WorkflowRun here; the garbage collector would delete the Job
    created = time.monotonic()
    create_step_job(plane, job)
    pods = wait_for("a pod for the step Job", lambda: json.loads(plane.kubectl(
        "get", "pods", "-n", NAMESPACE, "-l", "job-name=run-1-fetch-1", "-o", "json").stdout)["items"],
        180, interval=0.1)
    name = pods[0]["metadata"]["name"]
    wait_running(plane, NAMESPACE, name)
    print(f"\n[real node] step Job created -> container running in {time.monotonic() - created:.2f} s",
          file=sys.stderr)
    return str(name)


def test_step_container_runs_as_a_non_root_uid(plane: ControlPlane, step_pod: str) -> None:
    result = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "id", "-u")
    assert result.stdout.strip() == "65532"


def test_step_container_root_filesystem_is_read_only(plane: ControlPlane, step_pod: str) -> None:
    result = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "touch", "/written-by-step")
    assert result.returncode != 0
    assert "Read-only file system" in result.stderr
    writable = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "touch", "/tmp/scratch")
    assert writable.returncode == 0, "the control: its own /tmp is writable"


def test_step_container_has_no_service_account_token(plane: ControlPlane, step_pod: str) -> None:
    mounts = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "cat", "/proc/self/mounts").stdout
    assert "serviceaccount" not in mounts
    listing = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "ls", "/var/run/secrets/kubernetes.io")
    assert listing.returncode != 0


def test_step_container_sees_only_the_secret_its_step_names(plane: ControlPlane, step_pod: str) -> None:
    mounts = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "cat", "/proc/self/mounts").stdout
    credential_mounts = sorted(line.split()[1] for line in mounts.splitlines() if DEFAULT_CREDENTIALS_DIR in line)
    assert credential_mounts == [f"{DEFAULT_CREDENTIALS_DIR}/api"]
    token = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "cat", f"{DEFAULT_CREDENTIALS_DIR}/api/token")
    assert token.stdout == CANARY
    search = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "grep", "-rl", CANARY + "-unrelated",
                     "/var", "/etc", "/tmp", "/run")
    assert search.stdout.strip() == "", "the unrelated Secret's value is visible inside the step"


def test_step_container_holds_only_the_secret_key_its_step_reads(plane: ControlPlane, step_pod: str) -> None:
    """api-token holds token and admin-token; the step reads token, so admin-token is nowhere in the pod."""
    secret = json.loads(plane.kubectl("get", "secret", "api-token", "-n", NAMESPACE, "-o", "json").stdout)
    assert sorted(secret["data"]) == ["admin-token", "token"], "the control: the Secret has both keys"
    listing = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "ls", f"{DEFAULT_CREDENTIALS_DIR}/api")
    assert listing.returncode == 0 and listing.stdout.split() == ["token"]
    search = exec_in(plane, NAMESPACE, step_pod, "/bin/busybox", "grep", "-rl", ADMIN_CANARY,
                     DEFAULT_CREDENTIALS_DIR, "/var", "/etc", "/tmp", "/run")
    assert search.stdout.strip() == "", "the key the step does not read is visible inside the step"


def test_kubectl_logs_reads_the_container_through_the_kubelet(plane: ControlPlane) -> None:
    pod = sleeper_pod("logger", NAMESPACE)
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0]["command"] = ["/bin/busybox", "echo", "hello from the real node"]
    create(plane, pod)
    stderr = ""

    def logged() -> bool:
        nonlocal stderr
        logs = plane.kubectl("logs", "logger", "-n", NAMESPACE, check=False)
        stderr = logs.stderr
        return "hello from the real node" in logs.stdout

    assert wait_for("the container's log through the kubelet", logged, 120, interval=0.5, explain=lambda: stderr)


def test_pods_are_scheduled_onto_the_real_node(plane: ControlPlane) -> None:
    create(plane, sleeper_pod("plain", NAMESPACE))
    pod = wait_running(plane, NAMESPACE, "plain")
    assert pod["spec"]["nodeName"] == "towline-node"
