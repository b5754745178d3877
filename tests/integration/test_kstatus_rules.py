"""kstatus itself (the pinned sigs.k8s.io/cli-utils) on every kind of status the operator writes; no cluster.

The cluster test (test_run_columns_and_kstatus.py) shows the verdicts on real runs; this one covers
each phase and the cases a cluster test cannot reach on demand (a status one generation behind, an
operator that gave up on a run), by handing kstatus the wire form `kstatus_fields` produces.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from towline.api.run import WorkflowRunStatus
from towline.engine import TERMINAL_RUN_PHASES
from towline.engine.kstatus import kstatus_fields
from towline.engine.summary import set_condition
from towline_dev.kstatus import compute, find_kstatus

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def run(status: WorkflowRunStatus, generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
            "metadata": {"name": "r", "namespace": "ns", "generation": generation}, "status": status.to_wire()}


def written(phase: str, succeeded: str, reason: str, generation: int = 1) -> WorkflowRunStatus:
    status = WorkflowRunStatus(phase=phase, started_at=T0, message=f"the run is {phase}",
                               finished_at=T0 + timedelta(seconds=9) if phase in TERMINAL_RUN_PHASES else None)
    set_condition(status, "Succeeded", succeeded, reason=reason, message=status.message or "", now=T0)
    return kstatus_fields(status, generation, T0)


@pytest.mark.parametrize(("phase", "succeeded", "reason", "verdict"), [
    ("Pending", "Unknown", "Pending", "InProgress"),
    ("Running", "Unknown", "Running", "InProgress"),
    ("Waiting", "Unknown", "Waiting", "InProgress"),
    ("AwaitingApproval", "Unknown", "AwaitingApproval", "InProgress"),
    ("RetryScheduled", "Unknown", "RetryScheduled", "InProgress"),
    ("Succeeded", "True", "AllStepsSucceeded", "Current"),
    ("Failed", "False", "StepFailed", "Failed"),
    ("Failed", "False", "InvalidRun", "Failed"),
    ("Cancelled", "False", "Cancelled", "Failed"),
])
def test_kstatus_reads_each_phase_as_the_docs_say(phase: str, succeeded: str, reason: str, verdict: str) -> None:
    result = compute(run(written(phase, succeeded, reason)), binary=find_kstatus())
    assert result.status == verdict, result
    if verdict == "Failed":
        assert result.message == f"the run is {phase}"


def test_a_status_one_generation_behind_is_in_progress_even_for_a_finished_run() -> None:
    behind = run(written("Succeeded", "True", "AllStepsSucceeded", generation=1), generation=2)
    result = compute(behind)
    assert result.status == "InProgress"
    assert "generation is 2, but latest observed generation is 1" in result.message


def test_a_run_the_operator_gave_up_on_reads_failed() -> None:
    status = WorkflowRunStatus(phase="Running", started_at=T0)
    set_condition(status, "ReconcileFailing", "True", reason="RetryBudgetExhausted",
                  message="5 reconcile passes in a row failed", now=T0)
    assert compute(run(kstatus_fields(status, 1, T0))).status == "Failed"
