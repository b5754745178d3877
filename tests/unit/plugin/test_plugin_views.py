"""The pure parts of `runs`, `status` and `describe`: filters, `-o` formats, wide and all-namespace tables,
and the describe text."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from towline.plugin import filters, output, render
from towline.plugin.describe import describe
from towline.plugin.runtree import run_tree

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def run(name: str, phase: str, created: str, *, workflow: str = "nightly", namespace: str = "team") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"workflowRef": {"name": workflow}, "requestedBy": "carol"},
            "status": {"phase": phase}}


RUNS = [
    run("c", "Failed", "2026-12-01T11:50:00Z"),
    run("a", "Succeeded", "2026-11-29T12:00:00Z"),
    run("b", "Running", "2026-12-01T09:00:00Z", workflow="release", namespace="other"),
    run("d", "Pending", "2026-12-01T11:59:00Z"),
]


def names(runs: list[dict[str, Any]]) -> list[str]:
    return [r["metadata"]["name"] for r in runs]


def test_durations_and_counts() -> None:
    assert filters.duration("10m") == timedelta(minutes=10)
    assert filters.duration("1h30m") == timedelta(minutes=90)
    assert filters.duration("2d") == timedelta(days=2)
    for bad in ("", "10", "m", "10x", "1.5h", "-1h", "0s"):
        with pytest.raises(argparse.ArgumentTypeError):
            filters.duration(bad)
    assert filters.positive("3") == 3
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            filters.positive(bad)


def test_phases_are_repeatable_comma_lists_any_case_and_unknown_ones_are_named() -> None:
    assert filters.phases(["failed,Cancelled", "RUNNING"]) == {"Failed", "Cancelled", "Running"}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown phase 'Done'; use one or more of Pending, "):
        filters.phases(["Succeeded,Done"])


def test_filters_narrow_and_last_keeps_the_newest() -> None:
    assert names(filters.RunFilter().apply(RUNS, NOW)) == ["a", "b", "c", "d"]
    assert names(filters.RunFilter(phases=frozenset({"Failed", "Running"})).apply(RUNS, NOW)) == ["b", "c"]
    assert names(filters.RunFilter(workflow="nightly").apply(RUNS, NOW)) == ["a", "c", "d"]
    assert names(filters.RunFilter(since=timedelta(hours=1)).apply(RUNS, NOW)) == ["c", "d"]
    assert names(filters.RunFilter(last=2).apply(RUNS, NOW)) == ["c", "d"]
    assert names(filters.RunFilter(workflow="nightly", last=1, since=timedelta(days=7)).apply(RUNS, NOW)) == ["d"]


def test_machine_formats_print_the_objects() -> None:
    typed = [{"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun", **r} for r in RUNS[:2]]
    listed = json.loads(output.objects(typed, "json"))
    assert listed["kind"] == "List" and listed["items"] == typed
    assert yaml.safe_load(output.objects(typed, "yaml"))["items"] == typed
    assert output.objects(typed, "name") == "workflowrun/c\nworkflowrun/a"
    assert json.loads(output.objects(typed[:1], "json", single=True)) == typed[0]


def test_wide_and_all_namespaces_add_columns() -> None:
    trigger = {"type": "webhook", "name": "push", "deliveryId": "d-1"}
    hooked = {**RUNS[0], "spec": {**RUNS[0]["spec"], "trigger": trigger},
              "status": {"phase": "Failed", "message": "step push failed:\n  quota"}}
    plain = render.runs_table([hooked], NOW).splitlines()
    assert plain[0].split()[:3] == ["NAME", "WORKFLOW", "PHASE"]
    wide = render.runs_table([hooked], NOW, wide=True).splitlines()
    assert wide[0].split()[-3:] == ["AGE", "TRIGGER", "MESSAGE"]
    assert wide[1].endswith("   10m   webhook/push (delivery d-1)   step push failed: quota")
    every = render.runs_table(RUNS, NOW, all_namespaces=True).splitlines()
    assert every[0].startswith("NAMESPACE   NAME")
    assert [line.split()[:2] for line in every[1:]] == [["team", "a"], ["other", "b"], ["team", "c"], ["team", "d"]]


def failed_approved_run() -> dict[str, Any]:
    return {
        "metadata": {"name": "release-x", "namespace": "team", "creationTimestamp": "2026-12-01T11:00:00Z"},
        "spec": {"workflowRef": {"name": "release"}, "requestedBy": "carol", "params": {"env": "staging"},
                 "trigger": {"type": "webhook", "name": "push", "deliveryId": "72d3-aa"}},
        "status": {
            "phase": "Failed", "message": "step deploy failed", "startedAt": "2026-12-01T11:00:01Z",
            "finishedAt": "2026-12-01T11:02:01Z", "params": {"env": "staging", "region": "eu"},
            "workflowSpec": {"generation": 3, "steps": [
                {"id": "review", "approval": {"approvers": {"users": ["bob"]}}},
                {"id": "deploy", "needs": ["review"], "action": "http.request",
                 "with": {"url": "https://deploy.example/${{ params.env }}", "method": "POST"},
                 "credentials": {"token": "deploy-token"}},
            ]},
            "steps": [
                {"id": "review", "phase": "Succeeded", "approvalName": "release-x-review", "decidedBy": "bob"},
                {"id": "deploy", "phase": "Failed", "attempt": 2, "errorClass": "permanent",
                 "message": "HTTP 400 from deploy.example", "credentialsUsed": ["deploy-token"],
                 "output": {"status": 400, "body": {"error": "bad env"}},
                 "history": [
                     {"attempt": 1, "jobName": "towline-step-a1", "startedAt": "2026-12-01T11:00:05Z",
                      "finishedAt": "2026-12-01T11:00:07Z", "errorClass": "transient", "message": "HTTP 503"},
                     {"attempt": 2, "jobName": "towline-step-a2", "errorClass": "permanent", "message": "HTTP 400"},
                 ]},
            ],
        },
    }


def test_describe_shows_what_is_recorded() -> None:
    approval = {"metadata": {"name": "release-x-review"},
                "spec": {"step": "review", "approvers": {"users": ["bob"], "groups": ["sre"]}, "fourEyes": True,
                         "message": "ship to staging?", "decision": "Approved", "decidedBy": "bob",
                         "reason": "diff\nlooks right"},
                "status": {"phase": "Approved", "decidedAt": "2026-12-01T11:00:30Z"}}
    event = {"metadata": {"creationTimestamp": "2026-12-01T11:02:01Z"}, "type": "Warning", "reason": "RunFailed",
             "lastTimestamp": "2026-12-01T11:02:01Z", "count": 1, "source": {"component": "towline-operator"},
             "message": "step deploy failed"}
    text = describe(run_tree(failed_approved_run()), [approval], [event], NOW)
    for expected in (
        "Name:          release-x", "Workflow:      release (generation 3)", "Phase:         Failed",
        "Requested by:  carol", "Trigger:       webhook/push", "Delivery id:   72d3-aa",
        "Finished:      2026-12-01T11:02:01Z (took 2m00s)",
        "Params:\n  env: staging\n  region: eu",
        "  deploy  http.request  Failed\n    attempt 2, error class permanent",
        "    Credentials (Secret names): deploy-token",
        "    Inputs:\n      method: POST\n      url: https://deploy.example/${{ params.env }}",
        "    Output:\n      body:\n        error: bad env\n      status: 400",
        "    Attempt 1: 2.0s error class transient job towline-step-a1 - HTTP 503",
        "    Attempt 2: error class permanent job towline-step-a2 - HTTP 400",
        "    Approval: release-x-review, approved by bob",
        "  release-x-review  step review  Approved\n    Approvers: bob, group sre (four eyes: not the requester)",
        "    Approved by bob at 2026-12-01T11:00:30Z\n    Why: diff looks right",
        "Events:\n  TYPE     REASON     AGE  FROM              MESSAGE\n"
        "  Warning  RunFailed  57m  towline-operator  step deploy failed",
    ):
        assert expected in text, f"{expected!r} not in:\n{text}"


def test_describe_of_a_run_not_started() -> None:
    fresh = {"metadata": {"name": "n", "creationTimestamp": "2026-12-01T11:59:58Z"},
             "spec": {"workflowRef": {"name": "w"}, "trigger": {"type": "schedule", "name": "nightly",
                                                                "scheduledTime": "2026-12-01T12:00:00Z"}}}
    text = describe(run_tree(fresh), [], [], NOW)
    assert "Requested by:  (nobody: started by its trigger)" in text
    assert "Scheduled for: 2026-12-01T12:00:00Z" in text and "Params:        <none>" in text
    assert "Steps:         (none yet: the run has not started)" in text
    assert "Approvals:     <none>" in text and "Events:        <none>" in text
