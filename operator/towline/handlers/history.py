"""Keep the last N succeeded and failed runs of a workflow, as its policy says.

Older finished runs are deleted; their Jobs, egress policies and Approvals go
with them through owner references. Which runs exist and how they ended comes
from the caller (the runtime's watch-fed run summaries), so finishing a run
never lists the namespace's runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from towline.api.workflow import HistoryLimits
from towline.k8s.client import KubeApi
from towline.k8s.runs import delete_run

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinishedRun:
    name: str
    phase: str
    finished_at: str
    """RFC 3339 (sorts as text); empty when unknown, which sorts as the oldest."""


def runs_beyond_limits(runs: Iterable[FinishedRun], limits: HistoryLimits) -> list[FinishedRun]:
    """The succeeded and failed runs older than the newest `limits.succeeded` / `limits.failed` of each."""
    beyond: list[FinishedRun] = []
    ordered = sorted(runs, key=lambda run: (run.finished_at, run.name), reverse=True)
    for phase, keep in (("Succeeded", limits.succeeded), ("Failed", limits.failed)):
        beyond += [run for run in ordered if run.phase == phase][keep:]
    return beyond


async def enforce_history_limits(
    api: KubeApi, namespace: str, workflow: str, limits: HistoryLimits, finished: Iterable[FinishedRun]
) -> list[str]:
    """Delete the workflow's finished runs (`finished`) beyond `limits`; returns the names deleted."""
    deleted: list[str] = []
    for run in runs_beyond_limits(finished, limits):
        if await delete_run(api, namespace, run.name):
            log.info("%s/%s: deleted %s run %s (history limit)", namespace, workflow, run.phase, run.name)
            deleted.append(run.name)
    return deleted
