"""A subflow step in the display model: one node naming its Workflow and linking to its child run, which status,
graph, describe and the web view's run page render from that one node."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from towline.plugin import graph, render
from towline.plugin.describe import describe
from towline.plugin.runtree import run_tree, step_nodes
from towline.plugin.ui import views

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CHANGE = {"id": "change", "workflow": {"name": "change-approval", "params": {"change": "42"}}}


def release() -> dict[str, Any]:
    return {
        "metadata": {"name": "release-1", "namespace": "team"},
        "spec": {"workflowRef": {"name": "release"}, "requestedBy": "carol"},
        "status": {"phase": "Running", "workflowSpec": {"steps": [CHANGE]},
                   "steps": [{"id": "change", "phase": "Running", "attempt": 1, "childRun": "release-1-change",
                              "startedAt": "2026-12-01T11:59:00Z"}]},
    }


def test_a_subflow_step_is_a_node_naming_its_workflow_and_its_child_run() -> None:
    [node] = run_tree(release()).nodes
    assert (node.kind, node.label, node.child_run) == ("subflow", "workflow change-approval", "release-1-change")
    [declared] = step_nodes({"steps": [CHANGE]})
    assert (declared.kind, declared.label, declared.child_run) == ("subflow", "workflow change-approval", None)


def test_status_graph_describe_and_the_run_page_link_the_child_run() -> None:
    tree = run_tree(release())
    [node] = tree.nodes
    assert "child run release-1-change" in render.step_line(node, NOW)
    assert "run release-1-change" in graph.mermaid(graph.graph_of(tree.nodes))
    assert "Child run: release-1-change (kubectl towline describe release-1-change)" in describe(tree, [], [], NOW)
    assert views.step_view(node)["childRun"] == "release-1-change"
