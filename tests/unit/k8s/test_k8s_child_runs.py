"""A subflow step's child run: built owned by the parent, requested by the parent's requester, and counted only
when a run under its name is that child (trigger, controller and requester all say so)."""

from __future__ import annotations

from typing import Any

from towline.engine.actions import CreateChildRun
from towline.k8s.objects import RunRef
from towline.k8s.subflows import build_child_run, child_observation, foreign_child

PARENT = RunRef(name="release-1", namespace="team", uid="uid-parent", workflow="release")
ACTION = CreateChildRun(step_id="change", name="release-1-change", workflow="change-approval",
                        params={"change": "42"}, requested_by="carol", workflow_uid="uid-wf", chain=("release",))


def child(**spec: Any) -> dict[str, Any]:
    body = build_child_run(PARENT, ACTION)
    body["spec"].update(spec)
    body["status"] = {"phase": "Succeeded", "outputs": {"ticket": "CHG-42"}}
    return body


def test_the_child_is_owned_by_the_parent_requested_by_its_requester_with_a_parent_trigger() -> None:
    body = build_child_run(PARENT, ACTION)
    assert body["metadata"]["ownerReferences"] == [PARENT.owner_reference()]
    assert body["spec"] == {
        "workflowRef": {"name": "change-approval"}, "params": {"change": "42"}, "requestedBy": "carol",
        "trigger": {"type": "parent", "parent": {"run": "release-1", "uid": "uid-parent", "step": "change",
                                                 "chain": ["release"], "workflowUid": "uid-wf"}},
    }


def test_the_child_counts_with_its_outputs() -> None:
    seen = child_observation("change", child(), "release-1", "uid-parent", "carol")
    assert (seen.foreign, seen.phase, seen.outputs) == (None, "Succeeded", {"ticket": "CHG-42"})


def test_a_manual_run_under_the_childs_name_is_never_the_child() -> None:
    squat = child(trigger={"type": "manual"}, requestedBy="bob")
    squat["metadata"]["ownerReferences"] = []
    seen = child_observation("change", squat, "release-1", "uid-parent", "carol")
    assert seen.foreign == "its spec.trigger does not name this run and step as its parent"
    assert seen.outputs is None


def test_a_run_not_controlled_by_the_parent_or_of_another_requester_is_not_the_child() -> None:
    unowned = child()
    unowned["metadata"]["ownerReferences"] = []
    assert foreign_child(unowned, "release-1", "uid-parent", "change", "carol") == "this run is not its controller"
    assert foreign_child(child(requestedBy="bob"), "release-1", "uid-parent", "change", "carol") == (
        "its requestedBy 'bob' is not this run's requester")
    assert foreign_child(child(), "release-1", "uid-other", "change", "carol") is not None
