"""A loop's instances in the archive: each instance's entry, Approval and log is kept under the instance's id, as
a step's would be, and the archived run draws the loop as the live one does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from towline.archive.capture import approval_capture, log_capture, run_capture
from towline.archive.records import RunIndex
from towline.plugin.runtree import archived_run_tree

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
RUN = {
    "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
    "metadata": {"name": "rollout-1", "namespace": "ops", "uid": "u-run", "creationTimestamp": "2026-12-06T11:00:00Z"},
    "spec": {"workflowRef": {"name": "rollout"}, "requestedBy": "carol"},
    "status": {
        "phase": "Succeeded", "startedAt": "2026-12-06T11:00:01Z", "finishedAt": "2026-12-06T11:05:00Z",
        "workflowSpec": {"steps": [{"id": "review", "forEach": {"items": ["eu", "us"]},
                                    "approval": {"approvers": {"users": ["bob"]}}}]},
        "steps": [
            {"id": "review", "phase": "Succeeded", "loop": {"count": 2}, "output": [None, None]},
            {"id": "review[0]", "phase": "Succeeded", "approvalName": "rollout-1-review-0-1", "decidedBy": "bob",
             "reason": "Approved"},
            {"id": "review[1]", "phase": "Succeeded", "approvalName": "rollout-1-review-1-2", "decidedBy": "dave",
             "reason": "Approved"},
        ],
    },
}


def approval(name: str, step: str, by: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ops", "uid": f"u-{name}",
                         "ownerReferences": [{"kind": "WorkflowRun", "name": "rollout-1", "uid": "u-run"}]},
            "spec": {"runName": "rollout-1", "workflowName": "rollout", "step": step, "decision": "Approved",
                     "decidedBy": by, "expiresAt": "2026-12-07T11:00:00Z"},
            "status": {"phase": "Approved"}}


def test_each_instances_approval_is_its_own_record_naming_the_instance_and_who_decided() -> None:
    captures = [approval_capture(approval("rollout-1-review-0-1", "review[0]", "bob")),
                approval_capture(approval("rollout-1-review-1-2", "review[1]", "dave"))]
    assert [(c.body["approval"]["spec"]["step"], c.body["approval"]["spec"]["decidedBy"]) for c in captures] == [
        ("review[0]", "bob"), ("review[1]", "dave"),
    ]
    run = run_capture(RUN, [approval("rollout-1-review-0-1", "review[0]", "bob"),
                            approval("rollout-1-review-1-2", "review[1]", "dave")], [], NOW)
    assert isinstance(run.index, RunIndex) and run.index.approvers == ("bob", "dave")


def test_an_instances_log_is_kept_under_the_instances_id() -> None:
    pod = {"metadata": {"name": "towline-step-rollout-1-deploy-1-2-1-abcde", "uid": "u-pod",
                        "labels": {"towline.dev/run": "rollout-1", "towline.dev/step": "deploy.1",
                                   "towline.dev/attempt": "1"},
                        "annotations": {"towline.dev/step-id": "deploy[1]"}}}
    capture = log_capture(pod, "u-run", "step", "deployed\n", cap=1024)
    assert (capture.body["step"], capture.body["attempt"]) == ("deploy[1]", 1)


def test_the_archived_run_draws_the_loop_with_its_instances() -> None:
    record = run_capture(RUN, [], [], NOW).body
    tree = archived_run_tree({"record": record})
    assert [node.id for node in tree.nodes] == ["review"]
    loop = tree.nodes[0]
    assert loop.loop is not None and loop.loop.text == "2 instances: 2 succeeded"
    assert [(i.id, i.decided_by) for i in loop.instances] == [("review[0]", "bob"), ("review[1]", "dave")]
