"""reconcile_run through what RunDeps gives it, each part faked on its own: the clock a pass decides by, the
children it observes and keeps, the callbacks it reports to, and an Approval's decision reaching the run."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

from handler_fakes import NAMESPACE, TWO_STEPS, MemoryContext, jobs, run, setup, status_of, workflow

from towline.api.run import WorkflowRunStatus
from towline.engine.observed import Observed
from towline.handlers.context import RunDeps
from towline.handlers.runs import reconcile_run
from towline.k8s.client import APPROVALS
from towline.k8s.observe import observe_run

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
KEY = (NAMESPACE, "r1")


def at(context: MemoryContext, now: datetime) -> RunDeps:
    return dataclasses.replace(context.for_runs(), now=lambda: now)


def test_a_pass_decides_by_the_clock_it_is_given(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    asyncio.run(reconcile_run(at(context, NOW), NAMESPACE, "r1"))
    status = status_of(context, "r1")
    assert status["startedAt"] == "2026-12-01T10:00:00Z"
    assert [step["startedAt"] for step in status["steps"]] == ["2026-12-01T10:00:00Z"]


class Children:
    """RunChildren that observes through the real lists and says when the run's pods want a look."""

    def __init__(self, context: MemoryContext, pods_due: datetime | None) -> None:
        self.context = context
        self.pods_due = pods_due
        self.observed: list[str] = []
        self.kept: list[tuple[str, bool]] = []

    async def observe(self, namespace: str, run: str, run_uid: str, status: WorkflowRunStatus) -> Observed:
        self.observed.append(run)
        return await observe_run(self.context.api, namespace, run, run_uid)

    async def keep_step_pods(self, namespace: str, run: str, now: datetime, *, run_over: bool = False,
                             ) -> datetime | None:
        self.kept.append((run, run_over))
        return self.pods_due


def test_the_pass_looks_again_when_the_runs_pods_ask_to(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    children = Children(context, pods_due=NOW + timedelta(seconds=30))
    wake_at = asyncio.run(reconcile_run(dataclasses.replace(at(context, NOW), children=children), NAMESPACE, "r1"))
    assert wake_at == NOW + timedelta(seconds=30)
    assert children.observed == ["r1"] and children.kept == [("r1", False)]


def test_a_run_deleted_while_running_lets_its_pods_go_and_reports_nothing(context: MemoryContext) -> None:
    children = Children(context, pods_due=None)
    assert asyncio.run(reconcile_run(dataclasses.replace(at(context, NOW), children=children),
                                     NAMESPACE, "gone")) is None
    assert children.kept == [("gone", True)] and children.observed == []
    assert context.decided == [] and context.finished == []


GATED = {"steps": [
    {"id": "review", "approval": {"message": "ship it?", "approvers": {"users": ["bob"]}}},
    {"id": "ship", "needs": ["review"], "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}},
]}


def test_an_approvals_decision_reaches_the_run_through_its_children(context: MemoryContext) -> None:
    setup(context, workflow("rel", GATED), run("r1", "rel"))
    asyncio.run(reconcile_run(at(context, NOW), NAMESPACE, "r1"))
    assert status_of(context, "r1")["phase"] == "AwaitingApproval"
    [approval] = asyncio.run(context.api.list(APPROVALS.path(NAMESPACE)))
    assert approval["spec"]["step"] == "review" and jobs(context) == []

    name = approval["metadata"]["name"]
    asyncio.run(context.api.merge_patch(APPROVALS.path(NAMESPACE, name),
                                        {"spec": {"decision": "Approved", "decidedBy": "bob"}}))
    later = NOW + timedelta(minutes=5)
    asyncio.run(reconcile_run(at(context, later), NAMESPACE, "r1"))
    steps = {step["id"]: step for step in status_of(context, "r1")["steps"]}
    assert steps["review"]["phase"] == "Succeeded"
    assert steps["review"]["finishedAt"] == "2026-12-01T10:05:00Z", "decided when the pass's clock first saw it"
    assert jobs(context) == ["towline-step-r1-ship-1"]
    recorded = asyncio.run(context.api.get(APPROVALS.path(NAMESPACE, name)))
    assert recorded is not None and recorded["status"]["decidedAt"] == "2026-12-01T10:05:00Z"
