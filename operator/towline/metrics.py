"""The operator's Prometheus metrics about runs, steps, approvals and schedules.

Metric events are derived from a run's status before and after a reconcile
pass (`record_run_transition`), in the handler layer, after the status was
written: the engine stays pure, and a pass whose write lost a conflict records
nothing (the next pass sees the same transition and records it once).

Label values are bounded: namespace, workflow, trigger type, connector action,
phase, error class, decision. Never a run, step, job or user name.
API-call, reconcile and work-queue metrics live with the code they measure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from towline.api.run import StepStatus, WorkflowRunStatus
from towline.api.workflow import Step
from towline.engine.phases import TERMINAL_RUN_PHASES

# Steps take from a second to an hour; approvals from minutes to days; schedules fire within seconds.
STEP_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
DECISION_BUCKETS = (10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600)
LAG_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300)

RUNS_STARTED = Counter(
    "towline_runs_started_total", "Runs that started executing.", ["namespace", "workflow", "trigger"]
)
RUNS_FINISHED = Counter(
    "towline_runs_finished_total", "Runs that finished, by outcome (Succeeded, Failed, Cancelled).",
    ["namespace", "workflow", "outcome"],
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


def record_run_transition(
    namespace: str, workflow: str, trigger: str, before: WorkflowRunStatus, after: WorkflowRunStatus,
) -> None:
    """Count what changed between two statuses of one run that the operator wrote."""
    if before.phase == "Pending" and after.phase != "Pending" and after.started_at is not None:
        RUNS_STARTED.labels(namespace, workflow, trigger).inc()
    if after.phase in TERMINAL_RUN_PHASES and before.phase not in TERMINAL_RUN_PHASES:
        RUNS_FINISHED.labels(namespace, workflow, after.phase).inc()
    definitions = _definitions(after)
    old = {entry.id: entry for entry in before.steps}
    for entry in after.steps:
        _record_step(old.get(entry.id), entry, definitions.get(entry.gate_for or entry.id))


def _definitions(status: WorkflowRunStatus) -> dict[str, Step]:
    snapshot = status.workflow_spec
    if snapshot is None:
        return {}
    return {step.id: step for step in (*snapshot.steps, *snapshot.finally_, *snapshot.compensations)}


def _record_step(before: StepStatus | None, after: StepStatus, step: Step | None) -> None:
    if after.reason == "Reused" or (before is not None and before.model_dump() == after.model_dump()):
        return
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
        _observe(STEP_DURATION.labels(action, "Failed" if failed else "Succeeded"), record.started_at,
                 record.finished_at)
        if failed and (after.phase == "Retrying" or record.attempt < after.attempt):
            STEP_RETRIES.labels(record.error_class or "unknown").inc()


def _observe(histogram: Histogram, start: datetime | None, end: datetime | None) -> None:
    if start is not None and end is not None:
        histogram.observe(max(0.0, (end - start).total_seconds()))


def record_schedule_fired(namespace: str, workflow: str, lag_seconds: float) -> None:
    SCHEDULE_LAG.labels(namespace, workflow).observe(max(0.0, lag_seconds))


def open_approval_gates(run: Mapping[str, object]) -> int:
    """Approval gates of `run` (a WorkflowRun body) waiting for a decision; none once it finished."""
    status = run.get("status") or {}
    assert isinstance(status, dict)
    if status.get("phase") in TERMINAL_RUN_PHASES:
        return 0
    return sum(1 for step in status.get("steps") or [] if step.get("approvalName") and step.get("phase") == "Running")


class PendingApprovals(Collector):
    """`towline_approvals_pending{namespace}`: open approval gates of unfinished runs, from the watch cache.

    Computed at scrape time from what the operator's watches last saw, so it is right after a restart.
    `gates` yields (namespace, open gates) per run the process knows.
    """

    def __init__(self, gates: Callable[[], Iterable[tuple[str, int]]]) -> None:
        self._gates = gates

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "towline_approvals_pending", "Approval gates waiting for a decision.", labels=["namespace"]
        )
        counts: dict[str, int] = {}
        for namespace, open_gates in self._gates():
            counts[namespace] = counts.get(namespace, 0) + open_gates
        for namespace, count in sorted(counts.items()):
            family.add_metric([namespace], count)
        yield family


_PENDING: list[PendingApprovals] = []


def count_pending_approvals(gates: Callable[[], Iterable[tuple[str, int]]]) -> None:
    """Export `towline_approvals_pending` from `gates` (registered once per process; a later call re-points it)."""
    if _PENDING:
        _PENDING[0]._gates = gates
        return
    _PENDING.append(PendingApprovals(gates))
    REGISTRY.register(_PENDING[0])
