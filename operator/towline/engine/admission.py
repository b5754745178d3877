"""Admission of a run that has not started: whether it may start now under its Workflow's
`policy.maxConcurrentRuns` and the archive's backlog limit, and how it waits. Pure.

The rule, safe under concurrent passes and stale caches: a run that has not
started may start only while fewer than N runs of its workflow are *ahead of
it*, where ahead means not finished and either started (whatever its age) or
older (creationTimestamp, then name) and still queued. Older queued runs take
the free slots first, so runs start oldest first; a view that is behind (a run
shown unfinished after it finished, queued after it started) only counts more
runs ahead, never fewer, so it can delay a start but never allow an extra one.
Ordering by creationTimestamp first means a run's name, which its creator
chooses, cannot move it ahead of a run created earlier.

The archive's limit counts the namespace's ended runs that still hold the archive's finalizer: while they reach
the chart's archive.maxRunsAwaiting, no run starts there (docs/archive.md). That count is the watch's (the
`towline_runs_awaiting_archive` gauge): a view that is behind may let a run or two more start, or hold one a moment
longer. The handlers gather what is counted (towline.handlers.runs: the watch-fed view, then a fresh list) and carry
out `held_in_queue`'s answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from towline.api.run import WorkflowRunStatus
from towline.api.runterms import TERMINAL_RUN_PHASES
from towline.engine.actions import Decision, EmitEvent
from towline.engine.phases import transition_run
from towline.engine.state import STOPPED
from towline.engine.summary import has_condition, set_condition
from towline.text import clip
from towline_connectors.wire import parse_rfc3339

QUEUED_CONDITION = "Queued"
MAX_CONCURRENT_RUNS_REASON = "MaxConcurrentRuns"
ARCHIVE_BEHIND_REASON = "ArchiveBehind"
"""The Queued condition's reason while the namespace's ended runs awaiting the archive reach the chart's
archive.maxRunsAwaiting: no new run starts there until the archive catches up (docs/archive.md)."""


@dataclass(frozen=True, slots=True)
class RunInLine:
    """One run of the workflow as far as the limit is concerned."""

    name: str
    created: datetime
    started: bool
    """It has left Pending: it holds a slot until it finishes."""
    finished: bool

    @classmethod
    def of_phase(cls, name: str, created: datetime, phase: str | None) -> RunInLine:
        """A run as its phase places it: Pending (or none yet) holds no slot, a terminal phase none any more."""
        phase = phase or "Pending"
        return cls(name, created, started=phase != "Pending", finished=phase in TERMINAL_RUN_PHASES)

    @property
    def order(self) -> tuple[datetime, str]:
        return (self.created, self.name)


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """What a run that has not started waits behind."""

    max_concurrent_runs: int | None
    """Its Workflow's policy.maxConcurrentRuns as the Workflow is now (a queued run has no snapshot); None: none."""
    max_runs_awaiting: int = 0
    """The chart's archive.maxRunsAwaiting; 0: no limit."""
    awaiting_archive: int = 0
    """The namespace's ended runs the archive has not recorded yet."""

    @property
    def counts_runs(self) -> bool:
        """Whether the answer depends on the workflow's other runs (else no list of them is needed)."""
        return self.max_concurrent_runs is not None


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether the run may start, and what is ahead of it (for the message)."""

    may_start: bool
    running: int
    """Runs of the workflow that started and have not finished (this one excluded)."""
    queued_ahead: int
    """Older runs of the workflow still waiting for a slot."""


def admission(run: RunInLine, others: Iterable[RunInLine], limit: int | None) -> Admission:
    """Whether `run` (not started) may start under `limit` (None: no limit), given the workflow's other runs."""
    running = queued_ahead = 0
    for other in others:
        if other.name == run.name or other.finished:
            continue
        if other.started:
            running += 1
        elif other.order < run.order:
            queued_ahead += 1
    return Admission(limit is None or running + queued_ahead < limit, running, queued_ahead)


def held_in_queue(
    status: WorkflowRunStatus, *, cancel: bool, namespace: str, workflow: str, run: RunInLine,
    others: Iterable[RunInLine], limits: QueueLimits, now: datetime, stop: bool = False,
) -> Decision | None:
    """The decision for `run` (not started) while it must wait, or ends cancelled while waiting (spec.cancel or
    spec.stop, each named in the run's message); None: it may start.

    The archive's backlog holds it first (whatever the Workflow's limit); then the workflow's `others` ahead of it.
    """
    ended = cancel or stop
    if archive_behind(limits.awaiting_archive, limits.max_runs_awaiting):
        if ended:
            return cancel_queued_run(status, now, stopped=not cancel)
        return hold_run_for_archive(status, namespace, limits.awaiting_archive, limits.max_runs_awaiting, now)
    limit = limits.max_concurrent_runs
    if limit is None:
        return None
    seen = admission(run, others, limit)
    if seen.may_start:
        return None
    if ended:
        return cancel_queued_run(status, now, stopped=not cancel)
    return hold_run(status, workflow, limit, seen, now)


def max_concurrent_runs(workflow: Mapping[str, Any] | None) -> int | None:
    """The Workflow's (wire form) policy.maxConcurrentRuns; None when unset or the Workflow is missing (the start
    then fails with the reason, as it does without a limit)."""
    policy = ((workflow or {}).get("spec") or {}).get("policy") or {}
    limit = policy.get("maxConcurrentRuns")
    # The API server enforces the type and range; anything else is treated as unset.
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1 else None


def workflow_runs_in_line(runs: Iterable[Mapping[str, Any]], workflow: str) -> list[RunInLine]:
    """The runs (wire form, as listed) of `workflow`, as the limit counts them."""
    return [
        RunInLine.of_phase(str(body["metadata"]["name"]), parse_rfc3339(body["metadata"]["creationTimestamp"]),
                           (body.get("status") or {}).get("phase"))
        for body in runs
        if str(((body.get("spec") or {}).get("workflowRef") or {}).get("name", "")) == workflow
    ]


def queued_message(workflow: str, limit: int, seen: Admission) -> str:
    ahead = f" and {seen.queued_ahead} older run(s) queued" if seen.queued_ahead else ""
    return (f"queued: {seen.running} run(s) of workflow {workflow} running{ahead}, policy.maxConcurrentRuns is "
            f"{limit}; starts when one finishes")


def hold_run(status: WorkflowRunStatus, workflow: str, limit: int, seen: Admission, now: datetime) -> Decision:
    """Keep the run Pending (no snapshot, no Job) with the reason in its message and a Queued condition.

    The RunQueued Event goes out once, when the run first waits; later passes that
    still hold it change at most the counts in the message.
    """
    return _held(status, MAX_CONCURRENT_RUNS_REASON, queued_message(workflow, limit, seen), now)


def archive_behind(awaiting: int, limit: int) -> bool:
    """Whether a run that has not started must wait: `awaiting` ended runs of its namespace are not archived yet and
    `limit` (the chart's archive.maxRunsAwaiting; 0: no limit) is reached."""
    return limit > 0 and awaiting >= limit


def archive_behind_message(namespace: str, awaiting: int, limit: int) -> str:
    return (f"queued: {awaiting} ended run(s) of namespace {namespace} await the archive, archive.maxRunsAwaiting is "
            f"{limit}; starts when the archive catches up (is the archive running? kubectl get deploy -l "
            "app.kubernetes.io/component=archive in the chart's namespace; its log says why a record failed)")


def hold_run_for_archive(status: WorkflowRunStatus, namespace: str, awaiting: int, limit: int,
                         now: datetime) -> Decision:
    """Keep the run Pending, as `hold_run` does, while the archive is that far behind (reason ArchiveBehind)."""
    return _held(status, ARCHIVE_BEHIND_REASON, archive_behind_message(namespace, awaiting, limit), now)


def _held(status: WorkflowRunStatus, reason: str, message: str, now: datetime) -> Decision:
    updated = status.model_copy()
    updated.conditions = list(status.conditions)
    updated.message = clip(message, 2048)
    updated.wake_at = None
    first_time = not has_condition(status, QUEUED_CONDITION, "True")
    set_condition(updated, QUEUED_CONDITION, "True", reason=reason, message=message.removeprefix("queued: "), now=now)
    actions = (EmitEvent("Normal", "RunQueued", clip(message, 1024) or ""),) if first_time else ()
    return Decision(status=updated, actions=actions, wake_at=None)


def cancel_queued_run(status: WorkflowRunStatus, now: datetime, *, stopped: bool = False) -> Decision:
    """A run cancelled (or stopped) while it waited for a slot ends Cancelled without starting: no step, no
    finally; the message and the reason say which of spec.cancel and spec.stop ended it."""
    updated = status.model_copy()
    updated.conditions = list(status.conditions)
    field, reason = ("stop", STOPPED) if stopped else ("cancel", "Cancelled")
    message = f"the run was {'stopped' if stopped else 'cancelled'} (spec.{field}) before it started"
    transition_run(updated, "Cancelled")
    updated.finished_at = now
    updated.wake_at = None
    updated.message = message
    set_condition(updated, QUEUED_CONDITION, "False", reason=reason, message=message, now=now)
    set_condition(updated, "Succeeded", "False", reason=reason, message=message, now=now)
    return Decision(status=updated, actions=(EmitEvent("Warning", "RunCancelled", message),), wake_at=None)


def leave_queue(status: WorkflowRunStatus, now: datetime) -> None:
    """The run starts: a standing Queued condition turns False (its time says when the wait ended)."""
    standing = next((c for c in status.conditions if c.type == QUEUED_CONDITION and c.status == "True"), None)
    if standing is not None:
        message = ("the archive caught up (archive.maxRunsAwaiting)" if standing.reason == ARCHIVE_BEHIND_REASON
                   else "a slot under policy.maxConcurrentRuns was free")
        set_condition(status, QUEUED_CONDITION, "False", reason="Started", message=message, now=now)
