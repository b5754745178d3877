"""A pass decides on the run's latest watch event instead of reading it, but never on one older than its own write."""

from __future__ import annotations

from typing import Any

from towline.k8s.client import KubeApi
from towline.k8s.objects import StepPodSettings
from towline.runtime.config import OperatorConfig
from towline.runtime.operator import Operator

KEY = ("team", "release-1")


def operator() -> Operator:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    return Operator(config=config, connection=KubeApi(object()))


def run(version: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": KEY[1], "namespace": KEY[0], "resourceVersion": version,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"workflowRef": {"name": "release"}}, "status": {"phase": phase}}


def test_a_pass_gets_the_latest_event() -> None:
    process = operator()
    process.saw_run(KEY, run("10"))
    process.saw_run(KEY, run("11"))
    taken = process.latest_run(KEY)
    assert taken is not None
    assert taken["metadata"]["resourceVersion"] == "11"


def test_an_event_older_than_the_own_last_write_is_not_used() -> None:
    process = operator()
    process.saw_run(KEY, run("10"))
    process.wrote_run(KEY, run("12"))
    assert process.latest_run(KEY) is None, "the status written at 12 is newer: read it"
    process.saw_run(KEY, run("12"))
    assert process.latest_run(KEY) is not None, "the echo of the own write is current"


def test_a_finished_or_deleted_run_keeps_no_body() -> None:
    process = operator()
    process.saw_run(KEY, run("10"))
    process.saw_run(KEY, run("11", phase="Succeeded"))
    assert process.latest_run(KEY) is None
    process.saw_run(KEY, run("12"))
    process.forgot_run(KEY)
    assert process.latest_run(KEY) is None
