"""Helpers for tests on the real node: pods from the busybox test image, probes from inside them.

Probes are raw TCP connects by the container itself (`busybox nc`), so what they
measure is the network (and its NetworkPolicy enforcer), never an in-pod guard.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Literal

from tests.integration.support import wait_for

from towline.k8s.observe import managed_by_operator
from towline.k8s.steppods import build_step_pod
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OPERATOR_USER
from towline_dev.node import cleanup
from towline_dev.node.nodeimages import TEST_IMAGE
from towline_dev.node.realnode import RealNode

Outcome = Literal["connected", "refused", "timeout"]

RESTRICTED_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def sleeper_pod(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod that sleeps (to be probed with `kubectl exec`), shaped to pass Pod Security `restricted`."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe", "image": TEST_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/busybox", "sleep", "3600"],
                "securityContext": copy.deepcopy(RESTRICTED_CONTAINER_SECURITY),
            }],
        },
    }


def create(plane: ControlPlane, manifest: dict[str, Any], *, user: str = "admin", check: bool = True) -> Any:
    return plane.kubectl("create", "-f", "-", stdin=json.dumps(manifest), user=user, check=check)


JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def create_step_job(plane: ControlPlane, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create a step Job (labelled for a run) and its pod under the operator's user name, as the operator would
    (towline.k8s.steppods: the Job says `managedBy: towline.dev/operator`, so the Job controller makes no pod for
    it): the chart's admission policy towline-step-objects refuses such Jobs and pods from anyone else. Admin
    impersonates that name with admin's group, so it works whether or not the chart's RBAC is installed on `plane`
    yet. Returns the Job as created."""
    as_operator = ("--as", OPERATOR_USER, "--as-group", "system:masters")
    job: dict[str, Any] = json.loads(plane.kubectl("create", *as_operator, "-o", "json", "-f", "-",
                                                   stdin=json.dumps(manifest)).stdout)
    if managed_by_operator(job):
        plane.kubectl("create", *as_operator, "-f", "-", stdin=json.dumps(build_step_pod(job)))
    return job


def create_step_pod(plane: ControlPlane, manifest: dict[str, Any]) -> Any:
    """Create a pod labelled as a step's, as the Job controller (impersonated by admin): the chart's admission
    policy towline-step-objects refuses such pods from anyone else."""
    return plane.kubectl("create", "--as", JOB_CONTROLLER, "-f", "-", stdin=json.dumps(manifest))


def wait_running(plane: ControlPlane, namespace: str, name: str, timeout: float = 120) -> dict[str, Any]:
    """Wait until every container of the pod runs; return the pod."""
    last = ""

    def running() -> dict[str, Any] | None:
        nonlocal last
        result = plane.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
        last = result.stdout
        if result.returncode != 0:
            return None
        pod: dict[str, Any] = json.loads(result.stdout)
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return pod if statuses and all("running" in s.get("state", {}) for s in statuses) else None

    found: dict[str, Any] = wait_for(f"pod {namespace}/{name} to run", running, timeout, interval=0.2,
                                     explain=lambda: last[-2000:])
    return found


def exec_in(plane: ControlPlane, namespace: str, pod: str, *argv: str, timeout: float = 30) -> Any:
    return plane.kubectl("exec", "-n", namespace, pod, "--", *argv, check=False, timeout=timeout)


def tcp_probe(plane: ControlPlane, namespace: str, pod: str, host: str, port: int, wait: int = 3) -> Outcome:
    """Connect from inside the pod; 'connected' only if the far end answered with data or accepted."""
    result = exec_in(plane, namespace, pod, "/bin/busybox", "nc", "-w", str(wait), host, str(port))
    text = (result.stdout + result.stderr).lower()
    if result.returncode == 0:
        return "connected"
    if "refused" in text:
        return "refused"
    return "timeout"


def remove_node_images(node: RealNode, *references: str) -> None:
    """Forget images in the node's containerd, and (--sync) the content only they held, so that the next
    pod using them pulls them for real. The CRI names each image by its ID (`sha256:<config digest>`)
    too: that name holds the content until it goes.

    A stopped container of a deleted pod (the kubelet removes those only at its next container GC, within a
    minute) still holds its image's unpacked layers: a pull then finds them and fetches no blob. Such
    containers of these images go first, one at a time (a running one is left alone: it is in use)."""
    for container in _stopped_containers_of(node, set(references)):
        removed = cleanup.ctr(node.paths, "containers", "rm", container, timeout=120)
        # The kubelet's own container GC may remove one between the listing and here: gone either way.
        if removed.returncode != 0 and "not found" not in removed.stderr:
            raise RuntimeError(f"ctr containers rm {container} failed: {removed.stderr.strip()}")
    present = set(node.images())
    gone = [reference for reference in references if reference in present]
    if gone:
        cleanup.ctr(node.paths, "images", "rm", "--sync", *gone, check=True, timeout=120)


def _stopped_containers_of(node: RealNode, images: set[str]) -> list[str]:
    """IDs of the node's containers created from one of `images` (a name or an ID) that have no running task."""
    listed = cleanup.ctr(node.paths, "containers", "ls", check=True).stdout.splitlines()[1:]
    running = set(cleanup.running_tasks(node.paths))
    found = []
    for line in listed:
        fields = line.split()
        if len(fields) >= 2 and fields[1] in images and fields[0] not in running:
            found.append(fields[0])
    return found
