"""Hold a run that has not started while its Workflow's policy.maxConcurrentRuns is reached, or while the archive is
too far behind in its namespace (the chart's archive.maxRunsAwaiting). Glue only.

The archive's limit counts the namespace's ended runs that still hold the archive's finalizer, as the watch has shown
them (the `towline_runs_awaiting_archive` gauge): a view that is behind may let a run or two more start, or hold
one a moment longer; the runtime wakes the namespace's queued runs when the archive releases a run.

The limit is the Workflow's as it is when the run would start (a queued run
has no snapshot yet). The decision is `towline.engine.admission`: first on the
watch-fed view of the workflow's runs, which answers every pass of a queued
run without an API call; a run that view lets start is checked once more on a
fresh list from the API server, because a view that is behind may not show a
run that is ahead of it (a process that has just started, or a run created in
the same second with a name that sorts first).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from towline.api.run import WorkflowRun, WorkflowRunStatus
from towline.engine import (
    TERMINAL_RUN_PHASES,
    Decision,
    RunInLine,
    admission,
    archive_behind,
    cancel_queued_run,
    hold_run,
    hold_run_for_archive,
)
from towline.handlers.context import RunDeps
from towline.k8s.runs import list_runs
from towline_connectors.wire import parse_rfc3339

QUEUED_RECHECK = timedelta(seconds=60)
"""A queued run is woken when a run of its workflow finishes or the Workflow changes; this slow fallback
covers a wake-up lost with a restart of the process or a missed watch event, not the normal path."""


async def hold_if_queued(
    deps: RunDeps, run: WorkflowRun, meta: dict[str, Any], status: WorkflowRunStatus, now: datetime,
    *, workflow_body: dict[str, Any] | None,
) -> Decision | None:
    """The run's decision while it must wait for a slot (or was cancelled while waiting); None: it may start.

    `workflow_body` is the run's Workflow as just read: the limit is the one it has now.
    """
    namespace, workflow = meta["namespace"], run.spec.workflow_ref.name
    archive_limit = deps.archive.max_runs_awaiting
    if archive_limit:
        awaiting = deps.runs.awaiting_archive(namespace)
        if archive_behind(awaiting, archive_limit):
            if run.spec.cancel:
                return cancel_queued_run(status, now)
            return hold_run_for_archive(status, namespace, awaiting, archive_limit, now)
    limit = concurrency_limit(workflow_body)
    if limit is None:
        return None
    me = RunInLine(meta["name"], parse_rfc3339(meta["creationTimestamp"]), started=False, finished=False)
    seen = admission(me, deps.runs.in_line(namespace, workflow), limit)
    if seen.may_start:
        listed = await list_runs(deps.api, namespace)
        seen = admission(me, [in_line(body) for body in listed if workflow_of(body) == workflow], limit)
    if seen.may_start:
        return None
    if run.spec.cancel:
        return cancel_queued_run(status, now)
    return hold_run(status, workflow, limit, seen, now)


def concurrency_limit(raw: dict[str, Any] | None) -> int | None:
    """The Workflow's policy.maxConcurrentRuns; None when unset or the Workflow is missing (the start
    then fails with the reason, as it does without a limit)."""
    policy = ((raw or {}).get("spec") or {}).get("policy") or {}
    limit = policy.get("maxConcurrentRuns")
    # The API server enforces the type and range; anything else is treated as unset.
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1 else None


def workflow_of(body: dict[str, Any]) -> str:
    return str(((body.get("spec") or {}).get("workflowRef") or {}).get("name", ""))


def in_line(body: dict[str, Any]) -> RunInLine:
    """One listed run as the limit counts it."""
    meta = body["metadata"]
    phase = (body.get("status") or {}).get("phase") or "Pending"
    return RunInLine(str(meta["name"]), parse_rfc3339(meta["creationTimestamp"]),
                     started=phase != "Pending", finished=phase in TERMINAL_RUN_PHASES)
