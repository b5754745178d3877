"""A loop in the display model: one node with its instances' counts, which status, graph, describe and the web
view's run page render from that one node (and describe and the page list the instances)."""

from __future__ import annotations

from datetime import UTC, datetime

from towline.jsontypes import JSON
from towline.plugin import graph, render
from towline.plugin.describe import describe
from towline.plugin.runtree import run_tree, step_nodes
from towline.plugin.ui import views

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DEPLOY = {"id": "deploy", "needs": ["inventory"], "action": "http.request",
          "forEach": {"items": "steps.inventory.output.clusters", "maxParallel": 2}}


def rollout() -> JSON:
    """A loop of 5: one succeeded, one failed, one running, one behind its policy gate, one not started."""
    at = {"startedAt": "2026-12-01T11:00:00Z"}
    return {
        "metadata": {"name": "rollout-1", "namespace": "team"},
        "spec": {"workflowRef": {"name": "rollout"}, "requestedBy": "carol"},
        "status": {
            "phase": "Running",
            "workflowSpec": {"steps": [{"id": "inventory", "action": "http.request"}, DEPLOY,
                                       {"id": "report", "needs": ["deploy"], "action": "http.request"}]},
            "steps": [
                {"id": "inventory", "phase": "Succeeded", "attempt": 1},
                {"id": "deploy", "phase": "Running", "loop": {"count": 5, "items": ["a", "b", "c", "d", "e"]}, **at},
                {"id": "deploy[0]", "phase": "Succeeded", "attempt": 1, **at, "finishedAt": "2026-12-01T11:00:04Z"},
                {"id": "deploy[1]", "phase": "Failed", "attempt": 2, "errorClass": "permanent",
                 "message": "no such cluster", **at, "finishedAt": "2026-12-01T11:00:02Z"},
                {"id": "deploy[2]", "phase": "Running", "attempt": 1, "jobName": "towline-step-x-1", **at},
                {"id": "deploy__approval[3]", "gateFor": "deploy[3]", "phase": "Running",
                 "approvalName": "rollout-1-deploy--approval-3-0123456789", **at},
            ],
        },
    }


def test_a_loop_is_one_node_with_its_instances_and_their_counts() -> None:
    tree = run_tree(rollout())
    assert [node.id for node in tree.nodes] == ["inventory", "deploy", "report"]
    loop = tree.nodes[1]
    assert loop.label == "forEach http.request"
    assert loop.loop is not None
    assert (loop.loop.total, loop.loop.succeeded, loop.loop.failed, loop.loop.running, loop.loop.pending) == \
        (5, 1, 1, 1, 2)
    assert loop.loop.text == "5 instances: 1 succeeded, 1 failed, 1 running, 2 pending"
    assert [instance.id for instance in loop.instances] == ["deploy[0]", "deploy[1]", "deploy[2]",
                                                            "deploy__approval[3]"]
    assert loop.instances[3].kind == "policy-gate" and loop.instances[3].waiting_for_decision


def test_a_workflows_graph_marks_the_loop_without_counts() -> None:
    nodes = step_nodes({"steps": [DEPLOY]})
    assert (nodes[0].label, nodes[0].loop, nodes[0].instances) == ("forEach http.request", None, ())


def test_status_shows_the_loop_as_one_line_with_its_counts() -> None:
    text = render.status_tree(run_tree(rollout()), NOW)
    line = next(line for line in text.splitlines() if " deploy " in line)
    assert "5 instances: 1 succeeded, 1 failed, 1 running, 2 pending" in line
    assert "deploy[" not in text


def test_graph_labels_the_loop_node_with_its_counts() -> None:
    drawn = graph.mermaid(graph.graph_of(run_tree(rollout()).nodes))
    assert 'deploy["deploy<br/>forEach http.request<br/>5 instances: 1 succeeded, 1 failed, 1 running, ' \
           '2 pending<br/>Running"]' in drawn
    assert "deploy[0]" not in drawn


def test_describe_lists_each_instance() -> None:
    text = describe(run_tree(rollout()), [], [], NOW)
    assert "    Instances: 5 instances: 1 succeeded, 1 failed, 1 running, 2 pending" in text
    assert "      deploy[1]  Failed  attempt 2  2.0s  error class permanent  - no such cluster" in text
    assert ("      deploy__approval[3] (gate for deploy[3])  Running  1h00m  approval "
            "rollout-1-deploy--approval-3-0123456789") in text


def test_the_run_page_carries_the_counts_and_the_instances() -> None:
    page = views.run_detail(run_tree(rollout()))
    deploy = next(step for step in page["steps"] if step["id"] == "deploy")
    assert deploy["forEach"] is True
    assert deploy["loop"]["text"] == "5 instances: 1 succeeded, 1 failed, 1 running, 2 pending"
    assert [(i["id"], i["phase"]) for i in deploy["instances"]][:2] == [("deploy[0]", "Succeeded"),
                                                                         ("deploy[1]", "Failed")]
    assert deploy["instances"][3]["waitingForDecision"] is True
