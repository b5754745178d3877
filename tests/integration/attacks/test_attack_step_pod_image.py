"""carol, with the built-in `edit` role, against a step pod that is running on the real node: she tries to swap
its image for one whose "runner" writes a forged success, to drop its run label, and to get inside it (exec,
attach, port-forward, proxy, an ephemeral container). The API server refuses each (policies towline-step-objects
and towline-step-pod-access), and the run records the real result. With the spec policy's binding deleted, the
swap happens on the node (the kubelet restarts the container with her image, which writes the forged document),
and the operator still records a failure: it counts a result only from a pod that ran the image its Job asked for.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.attacks.attack_support import install, refused, run_manifest
from tests.integration.support import (
    ScriptedServer,
    apply,
    bind_role,
    create,
    list_objects,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.node.nodeimages import BUSYBOX
from towline_dev.node.ociarchive import ImageFile, ImageSpec, write_oci_archive
from towline_dev.node.realnode import NodeCluster

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced", "test_hosts")]

FORGER_IMAGE = "localhost/towline-forger:dev"
FORGED = '{"ok":true,"output":{"forged":"by-carol"}}'
SPEC_REFUSED = "the spec of a step pod (its image, above all) is what the run trusts for the step's result"
LABEL_REFUSED = "only the Towline operator and the Job controller may add or remove the label towline.dev/run"
INSIDE_REFUSED = "is a Towline step pod: nobody may"
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
              "seccompProfile": {"type": "RuntimeDefault"}}


@pytest.fixture(scope="module")
def forger_image(real_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image whose `python3` (the command every step container runs) writes a forged success and exits 0."""
    assert real_node.node is not None
    work = tmp_path_factory.mktemp("forger")
    script = work / "python3"
    script.write_text(f"#!/bin/busybox sh\n/bin/busybox printf '%s' '{FORGED}' > /dev/termination-log\n")
    archive = work / "forger.oci.tar"
    write_oci_archive(ImageSpec(FORGER_IMAGE, [ImageFile(BUSYBOX, "/bin/busybox"), ImageFile(script, "/bin/python3")],
                                entrypoint=["/bin/python3"]), archive)
    real_node.node.load_image(archive)
    return FORGER_IMAGE


def slow_workflow(namespace: str, url: str) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "slow", "namespace": namespace},
        "spec": {"steps": [{"id": "call", "action": "http.request", "retry": {"limit": 0},
                            "with": {"url": f"{url}/slow", "select": "response.body"}}]},
    }


def running_step_pod(cluster: ControlPlane, namespace: str, run: str) -> dict[str, Any]:
    """The run's step pod once its container runs (the runner then waits on the slow server)."""
    def probe() -> dict[str, Any] | None:
        for pod in list_objects(cluster, "pods", namespace, f"towline.dev/run={run}"):
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if any("running" in (s.get("state") or {}) for s in statuses):
                return pod
        return None

    found: dict[str, Any] = wait_for(f"a running step pod of {run}", probe, timeout=120)
    return found


def json_patch_as(cluster: ControlPlane, user: str, pod: str, namespace: str, ops: list[dict[str, Any]],
                  *extra: str) -> Any:
    return cluster.kubectl("patch", "pod", pod, "-n", namespace, "--type", "json", "-p", json.dumps(ops), *extra,
                           user=user, check=False)


def swap_image(pod: str) -> list[dict[str, Any]]:
    return [{"op": "replace", "path": "/spec/containers/0/image", "value": FORGER_IMAGE}]


def connect_as(cluster: ControlPlane, user: str, namespace: str, pod: str, what: str) -> tuple[int, str]:
    """POST a CONNECT subresource (exec, attach, portforward, proxy) as `user`, without upgrading: admission
    answers first (403 when a policy refuses); a request it lets through fails later for want of an upgrade."""
    config: dict[str, Any] = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    token = next(u["user"]["token"] for u in config["users"] if u["name"] == user)
    query = {"exec": "exec?command=true&stdout=true", "attach": "attach?stdout=true",
             "portforward": "portforward?ports=8080", "proxy": "proxy/"}[what]
    request = urllib.request.Request(f"{cluster.server}/api/v1/namespaces/{namespace}/pods/{pod}/{query}",
                                     method="POST", data=b"", headers={"Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=str(cluster.ca_cert))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def test_an_editor_cannot_swap_a_running_step_pods_image_relabel_it_or_get_inside_it(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str, forger_image: str,
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "edit", users=("carol",))
    with ScriptedServer() as server:
        server.script("/slow", (200, {"real": True}, {}), delay_seconds=20)
        install(cluster, slow_workflow(ns, server.url))
        assert create(cluster, run_manifest(ns, "slow", "slow-1", "admin")).returncode == 0
        pod = running_step_pod(cluster, ns, "slow-1")["metadata"]["name"]
        assert pod.startswith("towline-step-")

        refused(json_patch_as(cluster, "carol", pod, ns, swap_image(pod)), SPEC_REFUSED)
        unlabel = [{"op": "remove", "path": "/metadata/labels/towline.dev~1run"}]
        refused(json_patch_as(cluster, "carol", pod, ns, unlabel), LABEL_REFUSED)
        for what in ("exec", "attach", "portforward", "proxy"):
            status, body = connect_as(cluster, "carol", ns, pod, what)
            assert status == 403 and INSIDE_REFUSED in body, (what, status, body)
        # The control: the same request for a pod that is not a step's passes admission (and finds no pod).
        assert connect_as(cluster, "carol", ns, "carols-pod", "exec")[0] == 404
        # `edit` grants no ephemeral containers; a team that grants them (a debugging role) is refused all the same.
        apply(cluster, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                        "metadata": {"name": "debugger", "namespace": ns},
                        "rules": [{"apiGroups": [""], "resources": ["pods/ephemeralcontainers"],
                                   "verbs": ["get", "patch"]}]})
        apply(cluster, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                        "metadata": {"name": "debugger", "namespace": ns},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "debugger"},
                        "subjects": [{"kind": "User", "name": "carol", "apiGroup": "rbac.authorization.k8s.io"}]})
        debug = {"spec": {"ephemeralContainers": [{"name": "dbg", "image": forger_image, "command": ["/bin/python3"],
                                                   "securityContext": RESTRICTED}]}}

        def add_debug_container() -> Any:
            result = cluster.kubectl("patch", "pod", pod, "-n", ns, "--subresource", "ephemeralcontainers",
                                     "--type", "strategic", "-p", json.dumps(debug), user="carol", check=False)
            rbac_behind = "cannot get resource" in result.stderr or "cannot patch resource" in result.stderr
            return None if rbac_behind else result

        refused(wait_for("carol's debugging role to apply", add_debug_container, timeout=30), INSIDE_REFUSED)

        run = wait_for_phase(cluster, ns, "slow-1", {"Succeeded", "Failed"}, timeout=180)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert step_status(run, "call")["output"] == {"real": True}
    assert "by-carol" not in json.dumps(run["status"])


@pytest.fixture
def step_objects_policy_off(towline_installed: ControlPlane) -> Iterator[None]:
    """The spec policy's binding deleted for one test (the operator's own check is what remains), then back."""
    cluster = towline_installed
    saved = json.loads(cluster.kubectl("get", "validatingadmissionpolicybinding", "towline-step-objects",
                                       "-o", "json").stdout)
    cluster.kubectl("delete", "validatingadmissionpolicybinding", "towline-step-objects")
    try:
        yield
    finally:
        meta = saved["metadata"]
        saved["metadata"] = {key: meta[key] for key in ("name", "labels") if key in meta}
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(saved))
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "towline-step-probe", "namespace": "default"},
                 "spec": {"containers": [{"name": "c", "image": FORGER_IMAGE}]}}
        wait_for("the step-objects policy to be enforced again", lambda: cluster.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe), check=False).returncode != 0)


@pytest.mark.exclusive  # deletes the cluster-wide binding of towline-step-objects for a while
def test_without_the_policy_a_swapped_image_fails_the_step_and_never_supplies_its_result(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str, forger_image: str,
    step_objects_policy_off: None,
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "edit", users=("carol",))
    with ScriptedServer() as server:
        server.script("/slow", (200, {"real": True}, {}), delay_seconds=40)
        install(cluster, slow_workflow(ns, server.url))
        assert create(cluster, run_manifest(ns, "slow", "slow-2", "admin")).returncode == 0
        pod = running_step_pod(cluster, ns, "slow-2")["metadata"]["name"]
        wait_for("carol's image swap to be admitted", lambda: json_patch_as(
            cluster, "carol", pod, ns, swap_image(pod)).returncode == 0, timeout=30)
        run = wait_for_phase(cluster, ns, "slow-2", {"Succeeded", "Failed"}, timeout=180)

    # The forgery happened on the node: her image ran in the step pod and wrote the forged document...
    after = json.loads(cluster.kubectl("get", "pod", pod, "-n", ns, "-o", "json").stdout)
    (status,) = after["status"]["containerStatuses"]
    assert status["state"]["terminated"]["message"] == FORGED, status
    # ...and the run recorded a failure that says why, never the forged output.
    assert run["status"]["phase"] == "Failed", run["status"]
    step = step_status(run, "call")
    assert "does not count" in step["message"] and FORGER_IMAGE in step["message"], step
    assert "by-carol" not in json.dumps(run["status"])
