"""The operator's Prometheus metrics about runs, steps, approvals and schedules.

Metric events are derived from a run's status before and after a reconcile
pass (`record_run_transition`), in the handler layer, after the status was
written: the engine stays pure, and a pass whose write lost a conflict records
nothing (the next pass sees the same transition and records it once).

Gauges of what the operator's watches hold (runs by phase, open approval gates,
whether this replica leads) are computed at scrape time from the watch cache, never
incremented, so they are right after a restart.

Label values are bounded: namespace, workflow, trigger type, connector action,
phase, error class, decision. Never a run, step, job or user name.
API-call, reconcile and work-queue metrics live with the code they measure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Protocol, TypeVar

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

import towline.buildinfo  # noqa: F401 - registers towline_build_info on the operator's /metrics
from towline.api.loops import loop_of
from towline.api.run import StepStatus, WorkflowRunStatus
from towline.api.runterms import TERMINAL_RUN_PHASES
from towline.api.workflow import Step
from towline_connectors.wire import parse_rfc3339

# Steps take from a second to an hour; approvals from minutes to days; schedules fire within seconds.
STEP_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
DECISION_BUCKETS = (10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600)
LAG_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300)
# Runs take from seconds (no approval) to days (waiting at a gate): few buckets, since each workflow has its own.
RUN_BUCKETS = (10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600)

RUNS_STARTED = Counter(
    "towline_runs_started_total", "Runs that started executing.", ["namespace", "workflow", "trigger"]
)
RUNS_FINISHED = Counter(
    "towline_runs_finished_total", "Runs that finished, by outcome (Succeeded, Failed, Cancelled).",
    ["namespace", "workflow", "outcome"],
)
RUN_DURATION = Histogram(
    "towline_run_duration_seconds", "Duration of finished runs, from start to finish, by outcome.",
    ["namespace", "workflow", "outcome"], buckets=RUN_BUCKETS,
)
STEP_DURATION = Histogram(
    "towline_step_duration_seconds", "Duration of finished step attempts, by connector action and outcome.",
    ["action", "outcome"], buckets=STEP_BUCKETS,
)
STEP_RETRIES = Counter(
    "towline_step_retries_total", "Step attempts that failed and were scheduled to run again, by error class.",
    ["error_class"],
)
APPROVAL_DECISION = Histogram(
    "towline_approval_decision_seconds", "Time from an approval gate opening to its decision or expiry.",
    ["decision"], buckets=DECISION_BUCKETS,
)
SCHEDULE_LAG = Histogram(
    "towline_schedule_lag_seconds", "How late a scheduled run was created: actual minus scheduled fire time.",
    ["namespace", "workflow"], buckets=LAG_BUCKETS,
)
EGRESS_ISOLATION_MISSING = Counter(
    "towline_egress_isolation_missing_total",
    "Step attempts that failed because their pod's egress isolation was not in effect (no NetworkPolicy "
    "enforcer, or a slow one).", ["namespace"],
)


def record_run_transition(
    namespace: str, workflow: str, trigger: str, before: WorkflowRunStatus, after: WorkflowRunStatus,
) -> None:
    """Count what changed between two statuses of one run that the operator wrote."""
    if before.phase == "Pending" and after.phase != "Pending" and after.started_at is not None:
        RUNS_STARTED.labels(namespace, workflow, trigger).inc()
    if after.phase in TERMINAL_RUN_PHASES and before.phase not in TERMINAL_RUN_PHASES:
        RUNS_FINISHED.labels(namespace, workflow, after.phase).inc()
        # A run that never started (refused, cancelled while queued) has no duration.
        _observe(RUN_DURATION.labels(namespace, workflow, after.phase), after.started_at, after.finished_at)
    definitions = _definitions(after)
    old = {entry.id: entry for entry in before.steps}
    for entry in after.steps:
        declared = entry.gate_for or entry.id
        _record_step(old.get(entry.id), entry, definitions.get(loop_of(declared) or declared))


def _definitions(status: WorkflowRunStatus) -> dict[str, Step]:
    snapshot = status.workflow_spec
    if snapshot is None:
        return {}
    return {step.id: step for step in (*snapshot.steps, *snapshot.finally_, *snapshot.compensations)}


def _record_step(before: StepStatus | None, after: StepStatus, step: Step | None) -> None:
    if after.reason == "Reused" or after.loop is not None or (
            before is not None and before.model_dump() == after.model_dump()):
        return  # a loop is no attempt nor decision of its own: its instances are
    if after.gate_for is not None or (step is not None and step.approval is not None):
        if after.phase in ("Succeeded", "Failed") and (before is None or before.phase not in ("Succeeded", "Failed")):
            decision = after.reason if after.reason in ("Rejected", "Expired") else "Approved"
            _observe(APPROVAL_DECISION.labels(decision), after.started_at, after.finished_at)
        return
    action = step.action if step is not None and step.action else ("wait" if step and step.wait else "unknown")
    # Every finished attempt lands in `history` (capped, so new ones are told by attempt number).
    known = max((record.attempt for record in before.history), default=0) if before is not None else 0
    for record in after.history:
        if record.attempt <= known:
            continue
        failed = record.error_class is not None
        # An ended loop instance's last record leaves its times to the entry (towline.engine.loops.compact).
        current = record.attempt == after.attempt and record.started_at is None
        _observe(STEP_DURATION.labels(action, "Failed" if failed else "Succeeded"),
                 after.started_at if current else record.started_at,
                 after.finished_at if current else record.finished_at)
        if failed and (after.phase == "Retrying" or record.attempt < after.attempt):
            STEP_RETRIES.labels(record.error_class or "unknown").inc()


def _observe(histogram: Histogram, start: datetime | None, end: datetime | None) -> None:
    if start is not None and end is not None:
        histogram.observe(max(0.0, (end - start).total_seconds()))


def record_schedule_fired(namespace: str, workflow: str, lag_seconds: float) -> None:
    SCHEDULE_LAG.labels(namespace, workflow).observe(max(0.0, lag_seconds))


def record_isolation_missing(namespace: str) -> None:
    EGRESS_ISOLATION_MISSING.labels(namespace).inc()


def _open_gates(run: Mapping[str, object]) -> list[dict[str, object]]:
    status = run.get("status") or {}
    assert isinstance(status, dict)
    if status.get("phase") in TERMINAL_RUN_PHASES:
        return []
    return [step for step in status.get("steps") or [] if step.get("approvalName") and step.get("phase") == "Running"]


def open_approval_gates(run: Mapping[str, object]) -> int:
    """Approval gates of `run` (a WorkflowRun body) waiting for a decision; none once it finished."""
    return len(_open_gates(run))


def next_gate_expiry(run: Mapping[str, object]) -> float | None:
    """When the first open approval gate of `run` expires (Unix seconds), or None without one."""
    moments = [parse_rfc3339(str(step["expiresAt"])).timestamp()
               for step in _open_gates(run) if step.get("expiresAt")]
    return min(moments, default=None)


class WatchedRun(Protocol):
    """What the operator remembers of each run it watches (runtime.runstore.RunSummary)."""

    @property
    def workflow(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def open_gates(self) -> int: ...
    @property
    def gate_expiry(self) -> float | None: ...
    @property
    def awaiting_archive(self) -> bool: ...
    @property
    def name(self) -> str: ...
    @property
    def trigger(self) -> str: ...
    @property
    def letter_since(self) -> float | None: ...
    @property
    def replays(self) -> str | None: ...


class OperatorState(Collector):
    """Gauges computed at scrape time from the operator's watch cache and its Lease elector.

    - `towline_runs{namespace,workflow,phase}`: WorkflowRuns that exist, by phase;
    - `towline_approvals_pending{namespace}`: approval gates of unfinished runs waiting for a decision;
    - `towline_approval_next_expiry_timestamp_seconds{namespace}`: when the first of those expires;
    - `towline_runs_awaiting_archive{namespace}`: runs over (or being deleted) that the archive has not written yet
      (they hold its finalizer: the history limit cannot prune them, so they pile up while the archive is down);
    - `towline_run_dead_letters{namespace,trigger}`: runs that failed before their first step (dead letters of kind
      run, k8s.runletters) that no run replays yet, by how they were started;
    - `towline_run_dead_letter_oldest_timestamp_seconds{namespace,trigger}`: when the oldest of those failed;
    - `towline_leader`: 1 while this replica holds the Lease (and may act), else 0.

    Every replica watches, so each reports the same runs; only the leader acts. `runs` yields
    (namespace, run) for each run the process knows; it is called on the metrics server's thread.
    """

    def __init__(self, runs: Callable[[], Iterable[tuple[str, WatchedRun]]], leading: Callable[[], bool]) -> None:
        self.runs = runs
        self.leading = leading

    def collect(self) -> Iterator[GaugeMetricFamily]:
        phases: dict[tuple[str, str, str], int] = {}
        gates: dict[tuple[str], int] = {}
        expiry: dict[tuple[str], float] = {}
        awaiting: dict[tuple[str], int] = {}
        watched = list(self.runs())
        letters, oldest = _waiting_run_letters(watched)
        for namespace, run in watched:
            where = (namespace,)
            if run.awaiting_archive:
                awaiting[where] = awaiting.get(where, 0) + 1
            key = (namespace, run.workflow, run.phase)
            phases[key] = phases.get(key, 0) + 1
            if run.open_gates:
                gates[where] = gates.get(where, 0) + run.open_gates
            if run.gate_expiry is not None:
                expiry[where] = min(expiry.get(where, run.gate_expiry), run.gate_expiry)
        yield _gauge("towline_runs", "WorkflowRuns the operator watches, by phase.",
                     ["namespace", "workflow", "phase"], phases)
        yield _gauge("towline_approvals_pending", "Approval gates waiting for a decision.", ["namespace"], gates)
        yield _gauge("towline_approval_next_expiry_timestamp_seconds",
                     "When the first approval gate waiting for a decision expires (Unix time).", ["namespace"], expiry)
        yield _gauge("towline_runs_awaiting_archive",
                     "Runs over (or being deleted) that the archive has not written yet.", ["namespace"], awaiting)
        yield _gauge("towline_run_dead_letters",
                     "Runs that failed before their first step and that no run replays yet.",
                     ["namespace", "trigger"], letters)
        yield _gauge("towline_run_dead_letter_oldest_timestamp_seconds",
                     "When the oldest run that failed before its first step, not replayed yet, failed (Unix time).",
                     ["namespace", "trigger"], oldest)
        yield GaugeMetricFamily("towline_leader", "1 while this replica holds the Lease and may act, else 0.",
                                value=1 if self.leading() else 0)


LabelValues = TypeVar("LabelValues", bound=tuple[str, ...])


def _gauge(name: str, documentation: str, labels: list[str],
           values: Mapping[LabelValues, float]) -> GaugeMetricFamily:
    """A gauge with one sample per label values, in their order (a scrape reads the same order every time)."""
    gauge = GaugeMetricFamily(name, documentation, labels=labels)
    for label_values, value in sorted(values.items()):
        gauge.add_metric(list(label_values), value)
    return gauge


def _waiting_run_letters(
    watched: list[tuple[str, WatchedRun]],
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], float]]:
    """Per (namespace, trigger): how many runs that failed before their first step no run replays yet, and when
    the oldest of them failed."""
    replayed = {(namespace, run.replays) for namespace, run in watched if run.replays}
    letters: dict[tuple[str, str], int] = {}
    oldest: dict[tuple[str, str], float] = {}
    for namespace, run in watched:
        if run.letter_since is None or (namespace, run.name) in replayed:
            continue
        key = (namespace, run.trigger)
        letters[key] = letters.get(key, 0) + 1
        oldest[key] = min(oldest.get(key, run.letter_since), run.letter_since)
    return letters, oldest


_STATE: list[OperatorState] = []


def export_operator_state(runs: Callable[[], Iterable[tuple[str, WatchedRun]]], leading: Callable[[], bool]) -> None:
    """Export the OperatorState gauges (registered once per process; a later call re-points them)."""
    if _STATE:
        _STATE[0].runs, _STATE[0].leading = runs, leading
        return
    _STATE.append(OperatorState(runs, leading))
    REGISTRY.register(_STATE[0])
