"""Keep the last N succeeded and failed runs of a workflow, as its policy says.

Older finished runs are deleted; their Jobs, egress policies and Approvals go
with them through owner references.
"""

from __future__ import annotations

import contextlib
import logging

from towline.api.workflow import HistoryLimits, WorkflowSpec
from towline.k8s.client import KubeApi
from towline.k8s.runs import delete_run, list_runs, read_workflow

log = logging.getLogger(__name__)


async def enforce_history_limits(api: KubeApi, namespace: str, workflow: str) -> list[str]:
    """Delete finished runs beyond the limits; returns the names deleted."""

    raw = await read_workflow(api, namespace, workflow)
    limits = HistoryLimits()
    if raw is not None:
        with contextlib.suppress(ValueError):  # an invalid workflow keeps the default limits
            limits = WorkflowSpec.model_validate(raw.get("spec") or {}).policy.history
    runs = [r for r in await list_runs(api, namespace) if r["spec"]["workflowRef"]["name"] == workflow]
    deleted: list[str] = []
    for phase, keep in (("Succeeded", limits.succeeded), ("Failed", limits.failed)):
        finished = [r for r in runs if (r.get("status") or {}).get("phase") == phase]
        finished.sort(key=lambda r: (r.get("status") or {}).get("finishedAt") or "", reverse=True)
        for run in finished[keep:]:
            name = run["metadata"]["name"]
            if await delete_run(api, namespace, name):
                log.info("%s/%s: deleted %s run %s (history limit %d)", namespace, workflow, phase, name, keep)
                deleted.append(name)
    return deleted
