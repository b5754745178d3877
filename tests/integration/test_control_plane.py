"""The local control plane and node behave like a cluster: real Job controller, RBAC, volumes, deadlines.

Every Job here runs the runner image as a container on the real node (kubelet,
containerd, runc) and is finished by the real Job controller in
kube-controller-manager: the pod semantics the operator relies on (termination
messages, Secret volumes, env, deadlines, deletion) are the real ones.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from tests.integration.support import wait_for

from towline_dev.clients import KubeClients, raw_json
from towline_dev.controlplane import ControlPlane
from towline_dev.images import RUNNER_IMAGE
from towline_dev.node.layout import NODE_NAME

pytestmark = [pytest.mark.integration, pytest.mark.local_only]

HARDENED_CONTAINER = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def python_job(name: str, script: str, **pod_spec: Any) -> dict[str, Any]:
    container = {"name": "step", "image": RUNNER_IMAGE, "command": ["python3", "-c", script]}
    container.update(pod_spec.pop("container", {}))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [container],
                    **pod_spec,
                }
            },
        },
    }


def eventually(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    return wait_for(what, probe, timeout=timeout, interval=0.1)


def job_outcome(admin: KubeClients, namespace: str, name: str, timeout: float = 60.0) -> str:
    """`Complete` or `Failed`, as the Job controller concludes it."""

    def finished() -> str | None:
        job = raw_json(admin.batch.read_namespaced_job(name, namespace, _preload_content=False))
        for condition in job.get("status", {}).get("conditions") or []:
            if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
                return str(condition["type"])
        return None

    outcome: str = eventually(f"job {namespace}/{name} to finish", finished, timeout)
    return outcome


def job_pod(admin: KubeClients, namespace: str, job: str) -> dict[str, Any]:
    pods = raw_json(
        admin.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}", _preload_content=False)
    )["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    pod: dict[str, Any] = pods[0]
    return pod


def terminated(pod: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    return state


def test_job_completes_through_the_job_controller_with_its_termination_message(
    admin_client: KubeClients, namespace: str
) -> None:
    script = "import json; open('/dev/termination-log', 'w').write(json.dumps({'ok': True, 'output': 42}))"
    admin_client.batch.create_namespaced_job(namespace, python_job("ok", script))

    assert job_outcome(admin_client, namespace, "ok") == "Complete"
    pod = job_pod(admin_client, namespace, "ok")
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert pod["status"]["phase"] == "Succeeded"
    state = terminated(pod)
    assert (state["exitCode"], state["reason"]) == (0, "Completed")
    assert json.loads(state["message"]) == {"ok": True, "output": 42}


def test_failing_command_fails_the_job(admin_client: KubeClients, namespace: str) -> None:
    admin_client.batch.create_namespaced_job(namespace, python_job("boom", "import sys; sys.exit(3)"))

    assert job_outcome(admin_client, namespace, "boom") == "Failed"
    pod = job_pod(admin_client, namespace, "boom")
    assert pod["status"]["phase"] == "Failed"
    assert (terminated(pod)["exitCode"], terminated(pod)["reason"]) == (3, "Error")


def test_fallback_to_logs_on_error_uses_the_log_tail(admin_client: KubeClients, namespace: str) -> None:
    script = "import sys\nfor i in range(200): print('line', i)\nsys.exit(1)"
    job = python_job("noisy", script, container={"terminationMessagePolicy": "FallbackToLogsOnError"})
    admin_client.batch.create_namespaced_job(namespace, job)

    assert job_outcome(admin_client, namespace, "noisy") == "Failed"
    message = terminated(job_pod(admin_client, namespace, "noisy"))["message"]
    assert message.endswith("line 199\n")
    assert len(message.encode()) <= 2048
    assert "line 119\n" not in message  # only the last 80 lines are considered


def test_alice_is_forbidden_to_read_secrets_without_a_role(
    admin_client: KubeClients, alice_client: KubeClients, bob_client: KubeClients, namespace: str
) -> None:
    admin_client.core.create_namespaced_secret(namespace, {"metadata": {"name": "crm-api"}, "stringData": {"t": "x"}})

    for person in (alice_client, bob_client):
        with pytest.raises(ApiException) as denied:
            person.core.read_namespaced_secret("crm-api", namespace)
        assert denied.value.status == 403

    admin_client.rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "read-secrets"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    })
    admin_client.rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "team-a-reads-secrets"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-secrets"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a"}],
    })

    def alice_may_read() -> bool:
        try:
            alice_client.core.read_namespaced_secret("crm-api", namespace)
        except ApiException as error:
            assert error.status == 403
            return False
        return True

    eventually("alice's group role binding to take effect", alice_may_read, timeout=10)
    with pytest.raises(ApiException) as still_denied:
        bob_client.core.read_namespaced_secret("crm-api", namespace)
    assert still_denied.value.status == 403


def test_secret_volume_is_read_only_at_its_mount_path_in_a_hardened_pod(
    admin_client: KubeClients, namespace: str
) -> None:
    admin_client.core.patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    secret = {"metadata": {"name": "crm-api"}, "stringData": {"token": "s3cret"}}
    admin_client.core.create_namespaced_secret(namespace, secret)
    mount = "/var/run/towline/credentials/crm"
    script = f"""
import json, os
path = '{mount}/token'
try:
    open('{mount}/new', 'w')
    write = 'allowed'
except OSError as error:
    write = error.strerror
try:
    open('/tmp/scratch', 'w')
    root = 'writable'
except OSError as error:
    root = error.strerror
report = {{'uid': os.getuid(), 'content': open(path).read(), 'mode': oct(os.stat(path).st_mode & 0o777),
          'write': write, 'root': root, 'scratch': open('/scratch/x', 'w').write('ok')}}
open('/dev/termination-log', 'w').write(json.dumps(report))
"""
    job = python_job(
        "reads-secret", script,
        securityContext={"fsGroup": 65532},
        volumes=[{"name": "crm", "secret": {"secretName": "crm-api", "defaultMode": 0o400}},
                 {"name": "scratch", "emptyDir": {}}],
        container={"securityContext": HARDENED_CONTAINER,
                   "volumeMounts": [{"name": "crm", "mountPath": mount, "readOnly": True},
                                    {"name": "scratch", "mountPath": "/scratch"}]},
    )
    admin_client.batch.create_namespaced_job(namespace, job)

    assert job_outcome(admin_client, namespace, "reads-secret") == "Complete"
    report = json.loads(terminated(job_pod(admin_client, namespace, "reads-secret"))["message"])
    assert report == {"uid": 65532, "content": "s3cret", "mode": "0o440", "write": "Read-only file system",
                      "root": "Read-only file system", "scratch": 2}
    assert not Path(mount).exists(), "the mount must stay inside the container's mount namespace"
    assert not Path("/scratch").exists()


def test_pod_env_resolves_values_secret_keys_and_field_refs(admin_client: KubeClients, namespace: str) -> None:
    admin_client.core.create_namespaced_secret(namespace, {"metadata": {"name": "s"}, "stringData": {"k": "v1"}})
    env = [
        {"name": "PLAIN", "value": "hello"},
        {"name": "EXPANDED", "value": "$(PLAIN) world"},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    script = ("import json, os; open('/dev/termination-log', 'w').write(json.dumps("
              "{k: os.environ[k] for k in ('PLAIN', 'EXPANDED', 'FROM_SECRET', 'POD_NAMESPACE')}))")
    admin_client.batch.create_namespaced_job(namespace, python_job("env", script, container={"env": env}))

    assert job_outcome(admin_client, namespace, "env") == "Complete"
    assert json.loads(terminated(job_pod(admin_client, namespace, "env"))["message"]) == {
        "PLAIN": "hello", "EXPANDED": "hello world", "FROM_SECRET": "v1", "POD_NAMESPACE": namespace,
    }


def test_service_account_token_is_issued_and_projected(admin_client: KubeClients, namespace: str) -> None:
    directory = "/var/run/secrets/kubernetes.io/serviceaccount"
    script = (f"import os; d = '{directory}'; token = open(d + '/token').read(); "
              "open('/dev/termination-log', 'w').write(open(d + '/namespace').read() + ' ' + str(token.count('.')))")
    admin_client.batch.create_namespaced_job(namespace, python_job("sa", script, automountServiceAccountToken=True))

    assert job_outcome(admin_client, namespace, "sa") == "Complete"
    assert terminated(job_pod(admin_client, namespace, "sa"))["message"] == f"{namespace} 2"  # a JWT


def test_active_deadline_stops_a_long_process(admin_client: KubeClients, namespace: str) -> None:
    # The container's main process ignores SIGTERM (as PID 1 without a handler): the kubelet kills it.
    # The pod's deadline counts from the kubelet accepting it, so it is shortened only once the process runs: a
    # short deadline set up front could pass while a loaded node is still starting the container.
    job = python_job("slow", "import time; time.sleep(600)", activeDeadlineSeconds=600,
                     terminationGracePeriodSeconds=1)
    admin_client.batch.create_namespaced_job(namespace, job)
    pod_name = eventually("the pod to start", lambda: _running_pod(admin_client, namespace, "slow"))
    admin_client.core.patch_namespaced_pod(pod_name, namespace, {"spec": {"activeDeadlineSeconds": 1}})

    assert job_outcome(admin_client, namespace, "slow") == "Failed"
    pod = eventually("the kubelet to report the killed container", lambda: _terminated_pod(admin_client, namespace,
                                                                                           "slow"))
    assert (pod["status"]["phase"], pod["status"]["reason"]) == ("Failed", "DeadlineExceeded")
    assert terminated(pod)["exitCode"] == 137  # SIGKILL after the grace period


def test_deleting_the_pod_stops_its_process(
    admin_client: KubeClients, control_plane: ControlPlane, namespace: str
) -> None:
    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *_: (print('got SIGTERM', flush=True), sys.exit(0)))\n"
              "print('started', flush=True)\ntime.sleep(600)")
    admin_client.core.create_namespaced_pod(namespace, {
        "metadata": {"name": "sleeper"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "automountServiceAccountToken": False,
                 "containers": [{"name": "main", "image": RUNNER_IMAGE, "command": ["python3", "-c", script]}]},
    })
    eventually("the process to start", lambda: "started" in control_plane.kubectl(
        "logs", "sleeper", "-n", namespace, check=False).stdout)
    # Follow its output through the kubelet while the pod is deleted: the stream ends with the process.
    argv = [str(control_plane.binaries.path("kubectl")), "--kubeconfig", str(control_plane.kubeconfig),
            "--context", "admin", "logs", "-f", "sleeper", "-n", namespace]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as follow:
        eventually("kubectl logs -f to attach", lambda: follow.poll() is None, timeout=5)
        admin_client.core.delete_namespaced_pod("sleeper", namespace)
        output, _ = follow.communicate(timeout=60)

    def gone() -> bool:
        try:
            admin_client.core.read_namespaced_pod("sleeper", namespace)
        except ApiException as error:
            return error.status == 404
        return False

    # Removed well within the 30 s grace period: the process stopped on SIGTERM, not on a later SIGKILL.
    eventually("the pod object to be removed", gone, timeout=20)
    assert "got SIGTERM" in output, output


def test_node_is_ready_and_untainted(admin_client: KubeClients) -> None:
    node = raw_json(admin_client.core.read_node(NODE_NAME, _preload_content=False))
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    eventually(
        "the not-ready taint to be lifted",
        lambda: not raw_json(admin_client.core.read_node(NODE_NAME, _preload_content=False))["spec"].get("taints"),
        timeout=30,
    )


def _running_pod(admin: KubeClients, namespace: str, job: str) -> str | None:
    pods = admin.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    for pod in pods:
        if pod.status and pod.status.phase == "Running":
            return str(pod.metadata.name)
    return None


def _terminated_pod(admin: KubeClients, namespace: str, job: str) -> dict[str, Any] | None:
    pod = job_pod(admin, namespace, job)
    statuses = pod["status"].get("containerStatuses") or []
    return pod if statuses and "terminated" in statuses[0]["state"] else None


