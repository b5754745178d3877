"""A pass decides on the run's latest watch event instead of reading it, but never on one older than its own write."""

from __future__ import annotations

from typing import Any

from towline.k8s.client import KubeApi
from towline.k8s.objects import StepPodSettings
from towline.runtime.config import OperatorConfig
from towline.runtime.operator import Operator
from towline.runtime.runwatch import RunEvents

KEY = ("team", "release-1")


def operator() -> Operator:
    config = OperatorConfig(namespace="towline-system", identity="a", service_account="towline-operator",
                            pod_settings=StepPodSettings())
    return Operator(config=config, connection=KubeApi(object()))


def run(version: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": KEY[1], "namespace": KEY[0], "resourceVersion": version,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"workflowRef": {"name": "release"}}, "status": {"phase": phase}}


def version(process: Operator) -> str | None:
    body = process.run_deps.memory.latest(KEY)
    return None if body is None else str(body["metadata"]["resourceVersion"])


def test_a_pass_gets_the_latest_event() -> None:
    process = operator()
    process.saw_run(KEY, run("10"))
    process.saw_run(KEY, run("11"))
    taken = process.run_deps.memory.latest(KEY)
    assert taken is not None
    assert taken["metadata"]["resourceVersion"] == "11"


def test_until_the_watch_shows_the_own_write_a_pass_decides_on_the_write() -> None:
    process = operator()
    process.saw_run(KEY, run("10"))
    process.known.wrote(KEY, run("12"))
    assert version(process) == "12", "the write's answer is the newest known"
    process.saw_run(KEY, run("11"))
    assert version(process) == "12", "an event from before the write (the watch is in order) is not used"
    process.saw_run(KEY, run("12"))
    process.saw_run(KEY, run("13"))
    assert version(process) == "13", "after the write's echo every event is newer"


def test_versions_are_opaque_never_ordered() -> None:
    """The API server's resourceVersions are opaque strings; nothing may parse or compare them by size."""
    process = operator()
    process.saw_run(KEY, run("b7"))
    process.known.wrote(KEY, run("a9"))
    process.saw_run(KEY, run("zz"))
    assert version(process) == "a9"
    process.saw_run(KEY, run("a9"))
    process.saw_run(KEY, run("0"))
    assert version(process) == "0"


def test_an_echo_seen_before_the_writes_answer_is_kept() -> None:
    process = operator()
    process.saw_run(KEY, run("12"))
    process.known.wrote(KEY, run("12"))
    process.saw_run(KEY, run("13"))
    assert version(process) == "13", "nothing is awaited: the watch already showed the write"


def test_a_conflict_forgets_the_run_so_the_next_pass_reads_it() -> None:
    process = operator()
    process.saw_run(KEY, run("10"))
    process.known.wrote(KEY, run("12"))
    process.run_deps.memory.conflicted(KEY)
    assert process.run_deps.memory.latest(KEY) is None
    assert KEY in process.runs, "looked at again"
    process.saw_run(KEY, run("14"))
    assert version(process) == "14", "a relisted watch that never showed the write is followed again"


def test_a_write_that_finished_the_run_keeps_no_body() -> None:
    process = operator()
    process.saw_run(KEY, run("10"))
    process.known.wrote(KEY, run("12", phase="Succeeded"))
    assert process.run_deps.memory.latest(KEY) is None


def test_a_finished_or_deleted_run_keeps_no_body() -> None:
    process = operator()
    process.saw_run(KEY, run("10"))
    process.saw_run(KEY, run("11", phase="Succeeded"))
    assert process.run_deps.memory.latest(KEY) is None
    process.saw_run(KEY, run("12"))
    process.forgot_run(KEY)
    assert process.run_deps.memory.latest(KEY) is None


def test_the_echo_of_the_own_write_wakes_no_pass_but_any_other_event_does() -> None:
    process = operator()
    assert process.saw_run(KEY, run("10")), "somebody else's version"
    process.known.wrote(KEY, run("12"))
    assert process.saw_run(KEY, run("11")), "an older event is no echo (versions are only compared for equality)"
    assert not process.saw_run(KEY, run("12")), "the pass that wrote it decided on everything it shows"
    assert process.saw_run(KEY, run("13")), "a change after the write (a user's cancel) needs a pass"


def test_the_run_watch_queues_no_pass_for_the_echo() -> None:
    process = operator()
    events = RunEvents(process.saw_run, process.forgot_run, process.runs.add, lambda: process.known.summaries)
    process.known.wrote(KEY, run("12"))
    events.apply("MODIFIED", run("12"))
    assert KEY not in process.runs
    events.apply("MODIFIED", run("13"))
    assert KEY in process.runs


def test_the_echo_of_the_final_write_needs_no_pass_but_a_later_change_does() -> None:
    """Each finished run had one more pass for the echo of its final write, which read the run (a finished run keeps
    no body) to find nothing to do; a change after the end (a late cancel) still gets its pass."""
    process = operator()
    process.saw_run(KEY, run("10"))
    process.known.wrote(KEY, run("12", phase="Succeeded"))
    assert process.run_deps.memory.latest(KEY) is None, "a finished run keeps no body"
    assert process.saw_run(KEY, {**run("10"), "status": {"phase": "Succeeded"}}) is True  # the pass's own report
    assert process.saw_run(KEY, run("12", phase="Succeeded")) is False, "the echo of the final write"
    assert process.saw_run(KEY, run("14", phase="Succeeded")) is True, "a change after the end"
