"""The operator's status write of a Workflow keeps the labels and annotations it read in its body: the API server
keeps the object's metadata on a status write, but takes what the body leaves out as given up by every manager, so
a GitOps tool (or `kubectl towline schedule`) would lose its ownership of them."""

from __future__ import annotations

import asyncio
from typing import Any

from towline.k8s.runs import write_run_status, write_workflow_status


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


def test_a_runs_status_write_carries_its_labels_and_annotations_too() -> None:
    run = {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
           "metadata": {"name": "report-1", "namespace": "team", "resourceVersion": "9",
                        "labels": {"towline.dev/workflow": "report"},
                        "annotations": {"towline.dev/resume": "2026-12-07T04:00:00Z"}},
           "spec": {"workflowRef": {"name": "report"}}, "status": {}}
    api = Recorder()
    asyncio.run(write_run_status(api, run, {"phase": "Running"}))  # type: ignore[arg-type]
    [(path, body)] = api.sent
    assert path.endswith("/workflowruns/report-1/status")
    assert body["metadata"]["labels"] == {"towline.dev/workflow": "report"}
    assert body["metadata"]["annotations"] == {"towline.dev/resume": "2026-12-07T04:00:00Z"}
    assert body["status"] == {"phase": "Running"} and body["spec"] == run["spec"]
