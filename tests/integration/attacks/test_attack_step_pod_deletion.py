"""An editor (the built-in `edit` role, who may delete and patch pods) goes after a running step's pod, hoping the
step runs again: a POST that charges a card, say. The operator makes each step Job's one pod itself
(towline.k8s.steppods) with its finalizer towline.dev/step-result, so the pod cannot vanish before its end is
written on its Job: a Job without a pod then always means one never made. Removing that finalizer is refused
(policy towline-step-objects); a forced deletion stops the pod, its attempt fails, and no second pod is made.
The provider sees the call once."""

from __future__ import annotations

import json
import threading

import pytest
from tests.integration.attacks.attack_support import install, refused, run_manifest
from tests.integration.support import (
    ScriptedServer,
    bind_role,
    create,
    list_objects,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline.k8s.labels import STEP_POD_FINALIZER
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced", "test_hosts")]

OWNERSHIP = "only the Towline operator and the Job controller may add or remove the label towline.dev/run or " \
    "change the towline.dev/ labels, annotations, finalizers or ownerReferences of a step pod; carol may not"


def test_a_force_deleted_step_pod_is_never_made_again_and_its_call_is_not_repeated(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str,
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "edit", users=("carol",))
    hold = threading.Event()
    pod_uids: set[str] = set()
    with ScriptedServer() as api:
        charge = api.script("/charge", (200, {"charged": True}, {}), hold=hold)
        try:
            install(cluster, {
                "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                "metadata": {"name": "pay", "namespace": ns},
                "spec": {"steps": [{
                    "id": "charge", "action": "http.request",
                    "retry": {"limit": 3, "backoff": "fixed", "baseDelaySeconds": 1},
                    "with": {"url": f"{api.url}/charge", "method": "POST", "json": {"cents": 500}},
                }]},
            })
            create(cluster, run_manifest(ns, "pay", "pay-1", "admin"))
            wait_for("the charge to reach the provider", lambda: charge.requests, timeout=120)
            [pod] = list_objects(cluster, "pods", ns, "towline.dev/run=pay-1")
            name = pod["metadata"]["name"]
            pod_uids.add(pod["metadata"]["uid"])
            assert pod["metadata"]["finalizers"] == [STEP_POD_FINALIZER]
            unheld = json.dumps([{"op": "remove", "path": "/metadata/finalizers"}])
            refused(cluster.kubectl("patch", "pod", name, "-n", ns, "--type", "json", "-p", unheld, user="carol",
                                    check=False), OWNERSHIP)
            deleted = cluster.kubectl("delete", "pod", name, "-n", ns, "--force", "--grace-period=0",
                                      "--wait=false", user="carol", check=False)
            assert deleted.returncode == 0, deleted.stderr

            def over() -> dict[str, object] | None:
                for seen in list_objects(cluster, "pods", ns, "towline.dev/run=pay-1"):
                    pod_uids.add(seen["metadata"]["uid"])
                run = json.loads(cluster.kubectl("get", "workflowrun", "pay-1", "-n", ns, "-o", "json").stdout)
                return run if (run.get("status") or {}).get("phase") in {"Succeeded", "Failed"} else None

            done = wait_for("the run to end", over, timeout=180, interval=0.2)
        finally:
            hold.set()
    assert done is not None
    step = step_status(wait_for_phase(cluster, ns, "pay-1", {"Failed"}), "charge")
    assert step["phase"] == "Failed", step
    assert step["attempt"] == 1, "a mutating call whose outcome is unknown is not retried"
    assert len(charge.requests) == 1, "the provider was called once"
    assert len(pod_uids) == 1, f"one pod ever: {pod_uids}"
    [job] = list_objects(cluster, "jobs", ns, "towline.dev/run=pay-1")
    assert job["metadata"]["name"] == name, "one Job, named as its pod"
    assert [c["type"] for c in job["status"]["conditions"] if c["status"] == "True"] == ["FailureTarget", "Failed"]
    wait_for("the pod's deletion to end (let go once its end was written)",
             lambda: not list_objects(cluster, "pods", ns, "towline.dev/run=pay-1"), timeout=60)
