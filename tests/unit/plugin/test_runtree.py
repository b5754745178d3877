"""A run's display model (towline.plugin.runtree), built once from a run document, and the four views that render
it: `status`, `graph` (DOT and Mermaid), `describe` and the web view's run page (live and archived)."""

from __future__ import annotations

from datetime import UTC, datetime

from towline.jsontypes import JSON
from towline.plugin import graph, render
from towline.plugin.describe import describe
from towline.plugin.runtree import archived_run_tree, run_tree, step_nodes
from towline.plugin.ui import history, views

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def spec() -> JSON:
    """Every kind of step the schema has, a compensation named by onFailure, one that nothing ran, and finally."""
    return {
        "generation": 4,
        "steps": [
            {"id": "fetch", "action": "http.request", "credentials": {"crm": "crm-api"},
             "with": {"url": "https://crm.example/${{ params.q }}"}},
            {"id": "shape", "needs": ["fetch"], "action": "code.python", "with": {"source": "print(1)"}},
            {"id": "probe", "needs": ["fetch"], "action": "steptype/tcp-probe", "when": "params.probe"},
            {"id": "review", "needs": ["shape", "probe"], "approval": {"message": "ship?"}},
            {"id": "pause", "needs": ["review"], "wait": {"duration": "1m"}},
            {"id": "push", "needs": ["pause"], "action": "http.request", "onFailure": "undo_push"},
        ],
        "compensations": [
            {"id": "undo_push", "action": "http.request", "with": {"method": "DELETE"}},
            {"id": "undo_other", "action": "http.request"},
        ],
        "finally": [{"id": "tell", "action": "clustersteptype/notify"}],
    }


def failed_run() -> JSON:
    """push failed after its policy gate passed, undo_push ran, and tell's policy gate waits for a decision."""
    return {
        "metadata": {"name": "sync-1", "namespace": "team", "creationTimestamp": "2026-12-01T11:00:00Z"},
        "spec": {"workflowRef": {"name": "sync"}, "requestedBy": "carol", "params": {"q": "x"},
                 "trigger": {"type": "webhook", "name": "push", "deliveryId": "d-7"}},
        "status": {
            "phase": "Running", "startedAt": "2026-12-01T11:00:01Z", "workflowSpec": spec(),
            "steps": [
                {"id": "fetch", "phase": "Succeeded", "attempt": 1, "startedAt": "2026-12-01T11:00:02Z",
                 "finishedAt": "2026-12-01T11:00:03.5Z", "credentialsUsed": ["crm-api"], "output": {"n": 3}},
                {"id": "shape", "phase": "Succeeded", "attempt": 2,
                 "history": [{"attempt": 1, "jobName": "towline-step-shape-1", "errorClass": "transient",
                              "message": "HTTP 503", "image": "runner@sha256:ab"}]},
                {"id": "probe", "phase": "Skipped", "reason": "ConditionFalse"},
                {"id": "review", "phase": "Succeeded", "approvalName": "sync-1-review", "decidedBy": "bob"},
                {"id": "pause", "phase": "Succeeded", "wakeAt": "2026-12-01T11:02:00Z"},
                {"id": "push__approval", "gateFor": "push", "phase": "Succeeded", "approvalName": "sync-1-push-gate",
                 "decidedBy": "alice"},
                {"id": "push", "phase": "Failed", "attempt": 1, "errorClass": "permanent", "message": "HTTP 409"},
                {"id": "undo_push", "phase": "Succeeded", "attempt": 1},
                {"id": "tell__approval", "gateFor": "tell", "phase": "Running", "approvalName": "sync-1-tell-gate",
                 "expiresAt": "2026-12-02T11:00:00Z"},
            ],
        },
    }


READING_ORDER = ["fetch", "shape", "probe", "review", "pause", "push__approval", "push", "undo_push",
                 "tell__approval", "tell"]


# ---- the model --------------------------------------------------------------------------------------------------

def test_every_step_kind_is_named_as_the_schema_defines_it() -> None:
    nodes = {node.id: node for node in run_tree(failed_run()).nodes}
    assert {step_id: (node.kind, node.section) for step_id, node in nodes.items()} == {
        "fetch": ("action", "steps"), "shape": ("code", "steps"), "probe": ("step-type", "steps"),
        "review": ("approval", "steps"), "pause": ("wait", "steps"), "push__approval": ("policy-gate", "steps"),
        "push": ("action", "steps"), "undo_push": ("action", "compensations"),
        "tell__approval": ("policy-gate", "finally"), "tell": ("step-type", "finally"),
    }
    assert [node.label for node in nodes.values()] == [
        "http.request", "code.python", "steptype/tcp-probe", "approval", "wait", "approval (policy)",
        "http.request", "http.request", "approval (policy)", "clustersteptype/notify"]


def test_nodes_come_in_reading_order_with_each_policy_gate_before_its_step() -> None:
    assert [node.id for node in run_tree(failed_run()).nodes] == READING_ORDER


def test_a_policy_gate_takes_its_steps_needs_and_the_step_needs_the_gate() -> None:
    nodes = {node.id: node for node in run_tree(failed_run()).nodes}
    assert nodes["push__approval"].needs == ("pause",) and nodes["push__approval"].gate_for == "push"
    assert nodes["push"].needs == ("push__approval",)
    assert nodes["tell__approval"].needs == () and nodes["tell"].needs == ("tell__approval",)


def test_a_run_draws_the_compensations_a_failure_ran_and_a_workflow_draws_them_all() -> None:
    in_run = {node.id: node for node in run_tree(failed_run()).nodes if node.section == "compensations"}
    assert list(in_run) == ["undo_push"] and in_run["undo_push"].compensates == ("push",)
    in_workflow = [node for node in step_nodes(spec()) if node.section == "compensations"]
    assert [(node.id, node.compensates, node.phase) for node in in_workflow] == [
        ("undo_push", ("push",), None), ("undo_other", (), None)]


def test_each_node_carries_the_runs_state_attempts_and_decisions() -> None:
    nodes = {node.id: node for node in run_tree(failed_run()).nodes}
    assert nodes["shape"].attempt == 2 and nodes["shape"].history[0].error_class == "transient"
    assert nodes["shape"].history[0].image == "runner@sha256:ab"
    assert nodes["review"].decision == "Approved" and nodes["review"].decided_by == "bob"
    assert nodes["push__approval"].decision == "Approved" and not nodes["push__approval"].waiting_for_decision
    assert nodes["tell__approval"].waiting_for_decision and nodes["tell__approval"].expires_at == "2026-12-02T11:00:00Z"
    assert nodes["tell"].phase == "Pending", "a step the run has not reached is Pending"
    assert nodes["fetch"].credentials == ("crm-api",) and nodes["fetch"].credentials_used == ("crm-api",)
    assert nodes["pause"].wake_at == "2026-12-01T11:02:00Z" and nodes["probe"].when == "params.probe"
    rejected = failed_run()
    rejected["status"]["steps"][3].update(phase="Failed", reason="Rejected")
    assert {node.id: node for node in run_tree(rejected).nodes}["review"].decision == "Rejected"


def test_the_runs_facts_come_from_its_spec_and_status() -> None:
    facts = run_tree(failed_run()).facts
    assert (facts.name, facts.namespace, facts.workflow, facts.generation, facts.phase) == (
        "sync-1", "team", "sync", 4, "Running")
    assert facts.trigger.type == "webhook" and facts.trigger.delivery_id == "d-7"
    assert facts.params == {"q": "x"} and facts.requested_by == "carol"


def test_an_archived_run_is_the_run_its_record_kept() -> None:
    item = {"apiVersion": "archive.towline.dev/v1alpha1", "kind": "ArchivedRun", "metadata": {"name": "sync-1"},
            "record": {"run": failed_run(), "approvals": []}}
    archived = archived_run_tree(item)
    assert archived.archived and archived.nodes == run_tree(failed_run()).nodes
    assert archived.facts == run_tree(failed_run()).facts
    assert archived_run_tree({"record": "not a record"}).nodes == ()


def test_a_run_without_its_workflow_copy_still_shows_its_recorded_steps() -> None:
    bare = {"metadata": {"name": "r"}, "status": {"steps": [
        {"id": "a", "phase": "Succeeded"}, {"id": "b__gate", "gateFor": "b", "phase": "Running",
                                            "approvalName": "r-b"}]}}
    assert [(node.id, node.kind, node.phase) for node in run_tree(bare).nodes] == [
        ("a", "action", "Succeeded"), ("b__gate", "policy-gate", "Running")]


def test_malformed_fields_are_left_out_not_raised() -> None:
    odd = {"metadata": {"name": "r"}, "spec": {"trigger": "manual", "retryOf": []},
           "status": {"workflowSpec": {"steps": [{"id": 3}, "x", {"id": "a", "needs": "b", "with": []}]},
                      "steps": [{"phase": "Running"}, {"id": "a", "attempt": "2", "history": [None]}]}}
    tree = run_tree(odd)
    assert [(node.id, node.needs, node.attempt, node.history) for node in tree.nodes] == [("a", (), 0, ())]
    assert tree.facts.trigger.type == "manual" and tree.facts.retry_of is None


# ---- the four renderers draw what the model says ------------------------------------------------------------------

def test_status_shows_every_node_by_section_with_its_decision() -> None:
    lines = render.status_tree(run_tree(failed_run()), NOW).splitlines()
    sections = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert sections == ["steps:", "compensations:", "finally:"]
    listed = [line.split()[1] for line in lines if line.startswith("  ")]
    assert listed == READING_ORDER
    shown = {line.split()[1]: line for line in lines if line.startswith("  ")}
    assert "approved by alice" in shown["push__approval"] and "approved by bob" in shown["review"]
    assert "waiting for approval sync-1-tell-gate" in shown["tell__approval"]
    assert "error permanent" in shown["push"] and "- HTTP 409" in shown["push"]


def test_the_graph_draws_every_node_each_gate_as_a_hexagon_and_the_failure_that_ran_a_compensation() -> None:
    drawn = graph.graph_of(run_tree(failed_run()).nodes)
    text = graph.dot(drawn, "sync-1")
    for node in run_tree(failed_run()).nodes:
        assert f'  {node.id} [label="{node.id}\\n{node.label}\\n{node.phase}"' in text, node.id
    assert 'push__approval [label="push__approval\\napproval (policy)\\nSucceeded", shape=hexagon' in text
    assert 'tell__approval [label="tell__approval\\napproval (policy)\\nRunning", shape=hexagon' in text
    assert "pause -> push__approval;" in text and "push__approval -> push;" in text
    assert 'push -> undo_push [style=dashed, label="on failure"];' in text
    assert "subgraph cluster_finally" in text and "tell__approval; tell;" in text
    chart = graph.mermaid(drawn)
    assert "  push -. on failure .-> undo_push" in chart and '  tell__approval{{"tell__approval' in chart
    assert "class tell__approval running" in chart


def test_describe_names_each_nodes_kind_section_gate_and_decision() -> None:
    text = describe(run_tree(failed_run()), [], [], NOW)
    for expected in (
        "Workflow:      sync (generation 4)", "Trigger:       webhook/push", "Delivery id:   d-7",
        "  shape  code.python  Succeeded\n    attempt 2",
        "  probe  steptype/tcp-probe  Skipped\n    reason ConditionFalse",
        "  push__approval (gate for push)  approval (policy)  Succeeded",
        "    Approval: sync-1-push-gate, approved by alice",
        "  undo_push [compensations]  http.request  Succeeded\n    attempt 1\n    Compensates: push",
        "  tell__approval [finally] (gate for tell)  approval (policy)  Running",
        "  tell [finally]  clustersteptype/notify  Pending",
        "    Attempt 1: error class transient job towline-step-shape-1 - HTTP 503",
    ):
        assert expected in text, f"{expected!r} not in:\n{text}"
    assert [line.split()[0] for line in text.split("Steps:\n")[1].split("Approvals:")[0].splitlines()
            if line.startswith("  ") and not line.startswith("    ")] == READING_ORDER


def test_the_web_view_shows_compensations_and_policy_gates_and_offers_the_waiting_gates_decision() -> None:
    steps = {step["id"]: step for step in views.run_detail(run_tree(failed_run()))["steps"]}
    assert list(steps) == READING_ORDER
    assert steps["undo_push"]["section"] == "compensations" and steps["undo_push"]["compensates"] == ["push"]
    assert steps["push__approval"]["kind"] == "policy-gate" and steps["push__approval"]["gateFor"] == "push"
    assert steps["push"]["needs"] == ["push__approval"] and steps["push__approval"]["needs"] == ["pause"]
    waiting = steps["tell__approval"]
    assert waiting["waitingForDecision"] and waiting["approvalName"] == "sync-1-tell-gate"
    assert steps["shape"]["kind"] == "code" and steps["probe"]["kind"] == "step-type"
    assert steps["push__approval"]["decision"] == "Approved" and steps["push__approval"]["decidedBy"] == "alice"
    assert {step["kind"] for step in steps.values()} <= {
        "action", "code", "step-type", "approval", "policy-gate", "wait"}, "no kind the schema does not have"


def test_the_archived_run_page_draws_the_kept_run_as_the_live_page_does() -> None:
    item = {"metadata": {"name": "sync-1"}, "workflow": "sync", "phase": "Failed",
            "record": {"run": failed_run(), "approvals": [], "logs": []}}
    archived = history.archived_detail(item)
    assert archived["archived"] is True
    assert archived["steps"] == views.run_detail(run_tree(failed_run()))["steps"]
