"""Subflows in the archive: the child is recorded as a run of its own (its trigger naming the parent run and step,
its requester the parent's), and the parent's record names the child run on its subflow step."""

from __future__ import annotations

from datetime import UTC, datetime

from towline.archive.capture import run_capture
from towline.plugin.runtree import archived_run_tree

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
AT = {"startedAt": "2026-12-06T11:00:01Z", "finishedAt": "2026-12-06T11:05:00Z"}
PARENT = {
    "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
    "metadata": {"name": "release-1", "namespace": "ops", "uid": "u-parent",
                 "creationTimestamp": "2026-12-06T11:00:00Z"},
    "spec": {"workflowRef": {"name": "release"}, "requestedBy": "carol"},
    "status": {"phase": "Succeeded", **AT, "outputs": {"ticket": "CHG-42"},
               "workflowSpec": {"steps": [{"id": "change", "workflow": {"name": "change-approval"}}],
                                "subflows": {"change-approval": {"uid": "u-wf", "generation": 3}}},
               "steps": [{"id": "change", "phase": "Succeeded", "childRun": "release-1-change",
                          "output": {"ticket": "CHG-42"}}]},
}
CHILD = {
    "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
    "metadata": {"name": "release-1-change", "namespace": "ops", "uid": "u-child",
                 "creationTimestamp": "2026-12-06T11:00:02Z",
                 "ownerReferences": [{"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                                      "name": "release-1", "uid": "u-parent", "controller": True}]},
    "spec": {"workflowRef": {"name": "change-approval"}, "requestedBy": "carol",
             "trigger": {"type": "parent", "parent": {"run": "release-1", "uid": "u-parent", "step": "change",
                                                      "chain": ["release"]}}},
    "status": {"phase": "Succeeded", **AT, "outputs": {"ticket": "CHG-42"},
               "workflowSpec": {"steps": [{"id": "review", "approval": {"approvers": {"users": ["bob"]}}}]},
               "steps": [{"id": "review", "phase": "Succeeded", "decidedBy": "bob", "reason": "Approved"}]},
}


def test_the_parents_record_names_its_child_run_and_the_workflow_it_ran() -> None:
    record = run_capture(PARENT, [], [], NOW).body
    [node] = archived_run_tree({"record": record}).nodes
    assert (node.kind, node.subflow, node.child_run) == ("subflow", "change-approval", "release-1-change")
    assert record["run"]["status"]["workflowSpec"]["subflows"] == {"change-approval": {"uid": "u-wf",
                                                                                      "generation": 3}}


def test_the_child_is_recorded_as_a_run_naming_its_parent_and_requester() -> None:
    record = run_capture(CHILD, [], [], NOW).body
    spec = record["run"]["spec"]
    assert spec["trigger"]["parent"] == {"run": "release-1", "uid": "u-parent", "step": "change",
                                         "chain": ["release"]}
    assert spec["requestedBy"] == "carol"
