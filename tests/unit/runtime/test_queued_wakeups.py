"""Runs queued under policy.maxConcurrentRuns are looked at again as soon as a slot of their workflow frees."""

from __future__ import annotations

import asyncio
from typing import Any

from towline.k8s.client import KubeApi
from towline.k8s.objects import StepPodSettings
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
    lines = {line.name: (line.started, line.finished) for line in process.runs_in_line(NAMESPACE, "nightly")}
    assert lines == {"a": (True, False), "b": (False, False), "c": (True, True)}
