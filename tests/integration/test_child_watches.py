"""The operator's child streams against the real API server: a step pod enters the pod stream once it ended.

The pod stream asks the API server for ended step pods only (`towline.runtime.childwatch.FINISHED_PODS`): the
events of a pod on its way there (scheduled, started, running) cost the operator a decode each and told it
nothing. The pod here is held back from scheduling (a scheduling gate), so the test moves it through its
phases itself, as a kubelet would, through the status subresource.
"""

from __future__ import annotations

import asyncio

import pytest

from towline.jsontypes import JSON
from towline.k8s.client import PODS, KubeApi
from towline.k8s.labels import LABEL_STEP_POD
from towline.runtime.cache import ChildCache
from towline.runtime.childwatch import ChildEvents, watch_children
from towline_dev.controlplane import ControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.local_only]



class Recorded(ChildEvents):
    """ChildEvents that also note every pod event and when the first pod list ended."""

    def __init__(self) -> None:
        super().__init__(ChildCache(), None, lambda key: True, lambda key: None)
        self.pods: list[tuple[str, str]] = []
        self.pod_listed = asyncio.Event()
        self.pod_seen = asyncio.Event()

    def apply(self, kind: str, event: str, body: JSON) -> None:
        if kind == "Pod":
            self.pods.append((event, str((body.get("status") or {}).get("phase"))))
            self.pod_seen.set()
        super().apply(kind, event, body)

    def listed(self, kind: str, namespaces: set[str], scope: str | None) -> None:
        if kind == "Pod":
            self.pod_listed.set()
        super().listed(kind, namespaces, scope)


def step_pod(namespace: str) -> JSON:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "release-build-1-x", "namespace": namespace,
                     # Without the run label: only the operator may create a pod wearing it (the chart's
                     # towline-step-objects policy). The stream selects by the step-pod label alone.
                     "labels": {LABEL_STEP_POD: "true"}},
        "spec": {"schedulingGates": [{"name": "towline.dev/test-holds-it"}], "restartPolicy": "Never",
                 "containers": [{"name": "step", "image": "registry.invalid/step:1"}]},
    }


def with_status(pod: JSON, phase: str, state: JSON) -> JSON:
    return {**pod, "status": {"phase": phase, "containerStatuses": [
        {"name": "step", "image": "registry.invalid/step:1", "imageID": "", "ready": False, "restartCount": 0,
         "state": state}]}}


async def _moves_through_its_phases(plane: ControlPlane, namespace: str) -> list[tuple[str, str]]:
    api = await KubeApi.connect(str(plane.kubeconfig), context="admin")
    events = Recorded()
    streams = asyncio.create_task(watch_children(api, (namespace,), events))
    try:
        await asyncio.wait_for(events.pod_listed.wait(), 60)
        created, _ = await api.create(PODS.path(namespace), step_pod(namespace))
        running = await api.replace(PODS.path(namespace, created["metadata"]["name"], "status"),
                                    with_status(created, "Running", {"running": {}}))
        await api.replace(PODS.path(namespace, running["metadata"]["name"], "status"), with_status(
            running, "Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed",
                                                  "message": '{"ok": true, "output": {"v": 1}}'}}))
        await asyncio.wait_for(events.pod_seen.wait(), 60)
        return events.pods
    finally:
        streams.cancel()
        await asyncio.gather(streams, return_exceptions=True)
        await api.close()


def test_a_step_pod_enters_the_pod_stream_only_once_it_ended(control_plane: ControlPlane, namespace: str) -> None:
    seen = asyncio.run(_moves_through_its_phases(control_plane, namespace))
    # The stream delivers in order: had the Pending or Running pod been sent, it would have come first.
    assert seen == [("ADDED", "Succeeded")]
