"""An editor (the built-in `edit` role, who may delete pods) force-deletes a running step's pod, hoping the step
runs again: a POST that charges a card, say. The operator makes each step Job's one pod itself
(towline.k8s.steppods) and writes the Job's start before the pod exists, so a started Job whose pod is gone never
gets a second one: at the step's deadline the attempt fails as PodLost, and a mutating step is not retried (its
effect is unknown). The provider sees the call once."""

from __future__ import annotations

import threading

import pytest
from tests.integration.attacks.attack_support import install, run_manifest
from tests.integration.support import (
    ScriptedServer,
    bind_role,
    create,
    list_objects,
    step_status,
    wait_for,
    wait_for_phase,
)

from towline.engine.observed import REASON_POD_LOST
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced", "test_hosts")]


def test_a_force_deleted_step_pod_is_never_made_again_and_its_call_is_not_repeated(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str,
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "edit", users=("carol",))
    hold = threading.Event()
    with ScriptedServer() as api:
        charge = api.script("/charge", (200, {"charged": True}, {}), hold=hold)
        try:
            install(cluster, {
                "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                "metadata": {"name": "pay", "namespace": ns},
                "spec": {"steps": [{
                    "id": "charge", "action": "http.request", "timeoutSeconds": 15,
                    "retry": {"limit": 3, "backoff": "fixed", "baseDelaySeconds": 1},
                    "with": {"url": f"{api.url}/charge", "method": "POST", "json": {"cents": 500}},
                }]},
            })
            create(cluster, run_manifest(ns, "pay", "pay-1", "admin"))
            wait_for("the charge to reach the provider", lambda: charge.requests, timeout=120)
            [pod] = list_objects(cluster, "pods", ns, "towline.dev/run=pay-1")
            name = pod["metadata"]["name"]
            deleted = cluster.kubectl("delete", "pod", name, "-n", ns, "--force", "--grace-period=0", user="carol",
                                      check=False)
            assert deleted.returncode == 0, deleted.stderr
            done = wait_for_phase(cluster, ns, "pay-1", {"Succeeded", "Failed"}, timeout=180)
        finally:
            hold.set()
    step = step_status(done, "charge")
    assert done["status"]["phase"] == "Failed", done["status"]
    assert f"({REASON_POD_LOST})" in step["message"], step
    assert step["errorClass"] == "unknown_side_effect", "a mutating call whose outcome is unknown is not retried"
    assert len(charge.requests) == 1, "the provider was called once"
    [job] = list_objects(cluster, "jobs", ns, "towline.dev/run=pay-1")
    assert job["metadata"]["name"] == name, "one Job, named as its pod"
    assert [c["reason"] for c in job["status"]["conditions"] if c["type"] == "Failed"] == [REASON_POD_LOST]
    assert list_objects(cluster, "pods", ns, "towline.dev/run=pay-1") == [], "no second pod"
