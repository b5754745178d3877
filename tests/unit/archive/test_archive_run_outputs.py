"""A run's outputs (status.outputs) are part of its archived record and of the namespace's export."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from towline.archive.capture import run_capture
from towline.archive.exports import read_export
from towline.archive.store import open_store

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
OUTPUTS = {"version": "2.0", "hosts": ["a", "b"]}
SUCCEEDED = {
    "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
    "metadata": {"name": "deploy-1", "namespace": "ops", "uid": "u-run", "creationTimestamp": "2026-12-06T11:00:00Z"},
    "spec": {"workflowRef": {"name": "deploy-prod"}, "requestedBy": "carol"},
    "status": {"phase": "Succeeded", "startedAt": "2026-12-06T11:00:01Z", "finishedAt": "2026-12-06T11:05:00Z",
               "outputs": OUTPUTS},
}


def test_a_succeeded_runs_outputs_reach_its_record_and_the_export(tmp_path: Path) -> None:
    capture = run_capture(SUCCEEDED, [], [], NOW)
    assert capture.body["run"]["status"]["outputs"] == OUTPUTS
    store = open_store(f"sqlite:///{tmp_path / 'archive.db'}", now=NOW)
    try:
        store.append("ops", capture.kind, capture.key, capture.body, index=capture.index, recorded_at=NOW)
        lines = list(store.export("ops"))
    finally:
        store.close()
    bodies: list[Any] = [entry.body for entry in read_export(lines).entries]
    assert [body["run"]["status"]["outputs"] for body in bodies] == [OUTPUTS]
