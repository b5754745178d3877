"""Keep the last N succeeded and failed runs of a workflow, as its policy says.

Older finished runs are deleted; their Jobs, egress policies and Approvals go
with them through owner references. Which runs exist and how they ended comes
from the caller (the runtime's watch-fed run summaries), so finishing a run
never lists the namespace's runs.

A webhook run is also the ingress's record that its delivery happened (its
name is the delivery's signed identity): it is kept at least
`WEBHOOK_REPLAY_WINDOW` after it was created, whatever the limits, so a
signed delivery replayed within its timestamp tolerance finds its run
instead of starting another one (docs/ingress.md, "Exactly once").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from towline.api.workflow import HistoryLimits
from towline.k8s.client import KubeApi
from towline.k8s.runs import delete_run
from towline_connectors.wire import parse_rfc3339, rfc3339

log = logging.getLogger(__name__)

WEBHOOK_REPLAY_WINDOW = timedelta(seconds=3600)
"""The longest a signed delivery stays fresh: the largest `verify.toleranceSeconds` a trigger may set."""


@dataclass(frozen=True)
class FinishedRun:
    name: str
    phase: str
    finished_at: str
    """RFC 3339 (sorts as text); empty when unknown, which sorts as the oldest."""
    kept_until: str = ""
    """RFC 3339 UTC; until then the run is not deleted (a webhook run's replay window); empty: no such floor."""


def kept_until(created: str, webhook: bool) -> str:
    """The floor of a run's life: a webhook run's creation time plus the replay window (`created` as the API
    server writes it, e.g. 2026-12-01T11:00:00Z)."""
    if not webhook or not created:
        return ""
    return rfc3339(parse_rfc3339(created) + WEBHOOK_REPLAY_WINDOW, timespec="seconds")


def runs_beyond_limits(runs: Iterable[FinishedRun], limits: HistoryLimits, now: str = "") -> list[FinishedRun]:
    """The succeeded and failed runs older than the newest `limits.succeeded` / `limits.failed` of each, except
    those whose `kept_until` is after `now` (RFC 3339 UTC)."""
    beyond: list[FinishedRun] = []
    ordered = sorted(runs, key=lambda run: (run.finished_at, run.name), reverse=True)
    for phase, keep in (("Succeeded", limits.succeeded), ("Failed", limits.failed)):
        beyond += [run for run in ordered if run.phase == phase][keep:]
    return [run for run in beyond if not run.kept_until or run.kept_until <= now]


async def enforce_history_limits(
    api: KubeApi, namespace: str, workflow: str, limits: HistoryLimits, finished: Iterable[FinishedRun],
    *, now: datetime,
) -> list[str]:
    """Delete the workflow's finished runs (`finished`) beyond `limits`; returns the names deleted."""
    deleted: list[str] = []
    for run in runs_beyond_limits(finished, limits, rfc3339(now)):
        if await delete_run(api, namespace, run.name):
            log.info("%s/%s: deleted %s run %s (history limit)", namespace, workflow, run.phase, run.name)
            deleted.append(run.name)
    return deleted
