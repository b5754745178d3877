"""Runs queued under policy.maxConcurrentRuns are looked at again as soon as a slot of their workflow frees, and runs
held by archive.maxRunsAwaiting as soon as the archive releases a run of their namespace."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from towline.k8s.client import KubeApi
from towline.k8s.objects import StepPodSettings
from towline.runtime import operator as operator_module
from towline.runtime.config import OperatorConfig
from towline.runtime.operator import Operator

NAMESPACE = "team"


def operator() -> Operator:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    return Operator(config=config, connection=KubeApi(object()))


def run(name: str, phase: str | None, workflow: str = "nightly", second: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NAMESPACE, "resourceVersion": "1",
                         "creationTimestamp": f"2026-12-01T08:00:{second:02d}Z"},
            "spec": {"workflowRef": {"name": workflow}}, "status": {"phase": phase} if phase else {}}


def queued(process: Operator) -> set[str]:
    return {name for _, name in process.runs._queued}


def with_runs(*bodies: dict[str, Any]) -> Operator:
    process = operator()
    for body in bodies:
        process.saw_run((NAMESPACE, body["metadata"]["name"]), body)
    process.runs._queued.clear()
    return process


def test_a_run_finishing_wakes_the_queued_runs_of_its_workflow_only() -> None:
    process = with_runs(run("a", "Running"), run("b", None), run("c", None), run("other", None, workflow="weekly"))
    asyncio.run(process.on_run_finished(run("a", "Succeeded")))
    assert queued(process) == {"b", "c"}


def test_a_finish_seen_on_the_watch_wakes_the_queued_runs() -> None:
    process = with_runs(run("a", "AwaitingApproval"), run("b", "Pending"))
    process.saw_run((NAMESPACE, "a"), run("a", "Failed"))
    assert queued(process) == {"b"}


def test_deleting_an_unfinished_run_wakes_the_queued_runs() -> None:
    process = with_runs(run("a", "Running"), run("b", None))
    process.forgot_run((NAMESPACE, "a"))
    assert queued(process) == {"b"}


def test_listing_finished_runs_at_start_wakes_nobody() -> None:
    process = with_runs(run("b", None))
    process.saw_run((NAMESPACE, "old"), run("old", "Succeeded"))
    assert queued(process) == set()


def test_runs_in_line_reflect_the_watch() -> None:
    process = with_runs(run("a", "Running", second=1), run("b", None, second=2), run("c", "Cancelled", second=3),
                        run("other", "Running", workflow="weekly"))
    lines = {line.name: (line.started, line.finished) for line in process.run_deps.runs.in_line(NAMESPACE, "nightly")}
    assert lines == {"a": (True, False), "b": (False, False), "c": (True, True)}


def archived_operator(limit: int) -> Operator:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings(), archive=True, archive_max_runs_awaiting=limit)
    return Operator(config=config, connection=KubeApi(object()))


def held(body: dict[str, Any], *, deleting: bool = False) -> dict[str, Any]:
    """`body` still holding the archive's finalizer."""
    meta = {**body["metadata"], "finalizers": ["towline.dev/archive"]}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T09:00:00Z"
    return {**body, "metadata": meta}


def test_the_archive_releasing_a_run_wakes_the_namespaces_runs_that_have_not_started() -> None:
    process = archived_operator(2)
    for body in (held(run("a", "Succeeded")), held(run("b", "Failed")), run("c", None),
                 run("d", None, workflow="weekly"), held(run("e", "Running"))):
        process.saw_run((NAMESPACE, body["metadata"]["name"]), body)
    awaiting = process.run_deps.runs.awaiting_archive
    assert awaiting(NAMESPACE) == 2, "ended runs holding the finalizer; not e, still running"
    assert process.run_deps.runs.awaiting_archive("elsewhere") == 0
    process.runs._queued.clear()
    process.saw_run((NAMESPACE, "a"), run("a", "Succeeded"))  # the archive removed its finalizer
    assert process.run_deps.runs.awaiting_archive(NAMESPACE) == 1
    assert queued(process) == {"c", "d"}, "every workflow's: the limit is the namespace's"
    process.runs._queued.clear()
    process.saw_run((NAMESPACE, "b"), held(run("b", "Failed"), deleting=True))
    assert queued(process) == set(), "still held: deleted, not yet archived"
    process.forgot_run((NAMESPACE, "b"))
    assert process.run_deps.runs.awaiting_archive(NAMESPACE) == 0 and queued(process) == {"c", "d"}


def test_without_a_limit_a_release_wakes_nobody() -> None:
    process = archived_operator(0)
    process.saw_run((NAMESPACE, "a"), held(run("a", "Succeeded")))
    process.saw_run((NAMESPACE, "c"), run("c", None))
    process.runs._queued.clear()
    process.saw_run((NAMESPACE, "a"), run("a", "Succeeded"))
    assert queued(process) == set()
    assert process.run_deps.archive.max_runs_awaiting == 0


class SteppedClock:
    """A clock that jumps when told to; `moved()` returns once per jump."""

    def __init__(self) -> None:
        self.wall = datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)
        self.offset = 0.0
        self.jumped = asyncio.Event()

    def now(self) -> datetime:
        return self.wall + timedelta(seconds=self.offset)

    def monotonic(self) -> float:
        return 1000.0 + self.offset

    async def moved(self) -> None:
        await self.jumped.wait()
        self.jumped.clear()

    def jump(self, seconds: float) -> None:
        self.offset += seconds
        self.jumped.set()


def test_a_workflow_wake_up_is_due_as_soon_as_the_operators_clock_passes_it() -> None:
    async def body() -> None:
        clock = SteppedClock()
        config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                                pod_settings=StepPodSettings())
        process = Operator(config=config, connection=KubeApi(object()), clock=clock)
        assert process.now() == clock.now()
        tasks = [asyncio.create_task(process.workflows.run_delayed()),
                 asyncio.create_task(process._recheck_when_the_clock_moves())]
        try:
            key = (NAMESPACE, "minutely")
            process.workflows.add_at(key, clock.now() + timedelta(seconds=30))  # the next slot
            await asyncio.sleep(0.05)
            assert len(process.workflows) == 0, "not due before the slot"
            clock.jump(31)
            for _ in range(100):
                if len(process.workflows):
                    break
                await asyncio.sleep(0.01)
            assert key in process.workflows._queued, "due once the clock passed the slot, not 30 s later"
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(body())


def test_a_finished_runs_delayed_look_is_dropped_after_its_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain's passes each asked for a look at their step's deadline; once a pass finds the run finished, the
    look still waiting would only give a pass that reads the run to find nothing to do."""
    async def no_more_looks(process: Operator, namespace: str, name: str) -> None:
        return None

    monkeypatch.setattr(operator_module, "reconcile_run", no_more_looks)
    process = with_runs(run("a", "Running"))
    key = (NAMESPACE, "a")
    process.runs.add_after(key, 60)
    asyncio.run(process._reconcile_run(key))
    assert key in process.runs._waiting, "in flight: the look stays"
    process.saw_run(key, run("a", "Succeeded"))
    asyncio.run(process._reconcile_run(key))
    assert key not in process.runs._waiting
