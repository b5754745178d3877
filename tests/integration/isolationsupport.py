"""Step Jobs of the real runner image on the real node, for the egress isolation tests and bench.

A namespace gets the operator's own default-deny and step egress policy (one
test host allowed, the isolation probe target carved out); each Job is what
`build_step_job` makes, running `http.request` against that test host.
"""

from __future__ import annotations

import json
from typing import Any

from tests.integration.nodesupport import create, create_step_job
from tests.integration.support import wait_for

from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.k8s.objects import (
    RunRef,
    StepPodSettings,
    build_default_deny_policy,
    build_step_egress_policy,
    egress_rules,
    isolation_probe_network,
)
from towline.k8s.stepjobs import BuiltinAction, StepTypeImage, build_step_job
from towline.validation.catalog import connector_catalog
from towline_dev.controlplane import ControlPlane
from towline_dev.images import RUNNER_IMAGE, ensure_images
from towline_dev.node.layout import KUBERNETES_SERVICE_IP
from towline_dev.node.realnode import NodeCluster

DESTINATION = "198.51.100.204:8080"
TEST_HOSTS = "198.51.100.192/27"
PROBE = f"{KUBERNETES_SERVICE_IP}:443"
"""What the operator passes in a cluster: the `kubernetes` Service, as its own pod sees it."""
STEP = "call"


def load_runner_image(cluster: NodeCluster) -> None:
    assert cluster.node is not None
    archives = ensure_images(lambda message: None)
    cluster.node.load_image(archives[RUNNER_IMAGE])


def prepare_namespace(plane: ControlPlane, namespace: str) -> RunRef:
    run = RunRef(name="run-1", namespace=namespace, uid="00000000-0000-0000-0000-000000000015", workflow="wf")
    plane.kubectl("create", "namespace", namespace)
    policy = build_step_egress_policy(run, name="run-1-call", step_id=STEP, rules=egress_rules(
        egress=[{"cidr": DESTINATION.split(":", maxsplit=1)[0] + "/32", "ports": [8080]}], connector_ports=[],
        allow_private_networks=[TEST_HOSTS], never_open=isolation_probe_network(PROBE),
    ))
    del policy["metadata"]["ownerReferences"]  # no WorkflowRun here; the garbage collector would delete it
    for manifest in (build_default_deny_policy(namespace), policy):
        create(plane, manifest)
    return run


def start_step(plane: ControlPlane, run: RunRef, attempt: int, *, isolation_probe: str | None,
               timeout_seconds: int = 120) -> str:
    """Create the step Job for `attempt`; return its pod's name once it exists."""
    job_name = f"run-1-call-{attempt}"
    job = build_step_job(
        run, BuiltinAction(connector_catalog()),
        job_name=job_name, step_id=STEP, attempt=attempt, action="http.request",
        inputs={"url": f"http://{DESTINATION}/", "method": "GET"}, credentials={}, idempotency_key=f"k-{attempt}",
        timeout_seconds=timeout_seconds, allow_private_networks=[TEST_HOSTS],
        settings=StepPodSettings(image=RUNNER_IMAGE, isolation_probe=isolation_probe),
    )
    del job["metadata"]["ownerReferences"]
    create_step_job(plane, job)
    return _pod_of(plane, run.namespace, job_name)


PROBE_TYPE_IMAGE = "localhost/towline-steps/tcp-probe:dev"
"""The Go example step type (examples/step-types/tcp-probe-go): one raw connect, reported in its output."""


def start_user_step(plane: ControlPlane, run: RunRef, attempt: int, *, timeout_seconds: int = 120) -> str:
    """A user step type's Job (runner `prepare` with the isolation check, then tcp-probe connecting to
    DESTINATION); its pod's name once it exists."""
    job_name = f"run-1-call-{attempt}"
    step_type = ResolvedStepType(kind="StepType", name="tcp-probe", spec=StepTypeSpec(image=PROBE_TYPE_IMAGE))
    job = build_step_job(
        run, StepTypeImage(step_type), job_name=job_name, step_id=STEP, attempt=attempt,
        action="steptype/tcp-probe", inputs={"message": "m", "connect": DESTINATION}, credentials={},
        idempotency_key=f"k-{attempt}",
        timeout_seconds=timeout_seconds, settings=StepPodSettings(image=RUNNER_IMAGE, isolation_probe=PROBE),
    )
    del job["metadata"]["ownerReferences"]
    create_step_job(plane, job)
    return _pod_of(plane, run.namespace, job_name)


def _pod_of(plane: ControlPlane, namespace: str, job_name: str) -> str:
    def pods() -> list[dict[str, Any]]:
        return list(json.loads(plane.kubectl("get", "pods", "-n", namespace, "-l", f"job-name={job_name}",
                                             "-o", "json").stdout)["items"])

    found = wait_for(f"a pod for the step Job {job_name}", pods, 120, interval=0.1)
    return str(found[0]["metadata"]["name"])


def init_container_state(plane: ControlPlane, namespace: str, pod: str) -> dict[str, Any]:
    result = plane.kubectl("get", "pod", pod, "-n", namespace, "-o", "json", check=False)
    if result.returncode != 0:
        return {}
    statuses = json.loads(result.stdout).get("status", {}).get("initContainerStatuses") or []
    return dict(statuses[0].get("state", {})) if statuses else {}


def container_state(plane: ControlPlane, namespace: str, pod: str) -> dict[str, Any]:
    result = plane.kubectl("get", "pod", pod, "-n", namespace, "-o", "json", check=False)
    if result.returncode != 0:
        return {}
    statuses = json.loads(result.stdout).get("status", {}).get("containerStatuses") or []
    return dict(statuses[0].get("state", {})) if statuses else {}


def wait_state(plane: ControlPlane, namespace: str, pod: str, state: str, timeout: float = 180) -> dict[str, Any]:
    current: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        nonlocal current
        current = container_state(plane, namespace, pod)
        return current if state in current or (state == "running" and "terminated" in current) else None

    found: dict[str, Any] = wait_for(f"pod {namespace}/{pod} to be {state}", reached, timeout, interval=0.2,
                                     explain=lambda: current)
    return found


def finished(plane: ControlPlane, namespace: str, pod: str, timeout: float = 180) -> tuple[dict[str, Any], str]:
    """The runner's result document and its log, once the container terminated."""
    terminated = wait_state(plane, namespace, pod, "terminated", timeout)["terminated"]
    log = plane.kubectl("logs", "-n", namespace, pod, check=False).stdout
    return json.loads(terminated.get("message") or "{}"), log


def isolation_wait_seconds(log: str) -> float | None:
    """The runner's own figure: how long after it started the isolation was proven."""
    for line in log.splitlines():
        if "egress isolation in effect after " in line:
            return float(line.split("egress isolation in effect after ", 1)[1].split("s", 1)[0])
    return None
