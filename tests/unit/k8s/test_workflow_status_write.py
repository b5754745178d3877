"""The operator's status write of a Workflow keeps the labels and annotations it read in its body: the API server
keeps the object's metadata on a status write, but takes what the body leaves out as given up by every manager, so
a GitOps tool (or `kubectl towline schedule`) would lose its ownership of them."""

from __future__ import annotations

import asyncio
from typing import Any

from towline.k8s.runs import write_workflow_status


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((path, body))
        return body


def test_the_status_write_carries_the_labels_and_annotations_it_read() -> None:
    workflow = {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                "metadata": {"name": "report", "namespace": "team", "resourceVersion": "7",
                             "labels": {"app.kubernetes.io/instance": "reports"},
                             "annotations": {"suspend.towline.dev/nightly": "true"}},
                "spec": {"steps": []}, "status": {}}
    api = Recorder()
    asyncio.run(write_workflow_status(api, workflow, {"observedGeneration": 1}))  # type: ignore[arg-type]
    [(path, body)] = api.sent
    assert path.endswith("/workflows/report/status")
    assert body["metadata"] == {"name": "report", "namespace": "team", "resourceVersion": "7",
                                "labels": {"app.kubernetes.io/instance": "reports"},
                                "annotations": {"suspend.towline.dev/nightly": "true"}}
