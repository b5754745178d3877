"""What the web view shows of runs, approvals and workflows: named fields only."""

from __future__ import annotations

from typing import Any

from towline.plugin.runtree import run_tree
from towline.plugin.ui import views


def run(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "r1", "creationTimestamp": "2026-12-01T10:00:00Z", "managedFields": [{"x": 1}]},
        "spec": {"workflowRef": {"name": "wf"}, "requestedBy": "carol", "trigger": {"type": "manual"}},
        "status": {
            "phase": "Running",
            "workflowSpec": {
                "steps": [
                    {"id": "fetch", "action": "http.request", "with": {"url": "https://x.example"},
                     "credentials": {"crm": "crm-api"}},
                    {"id": "review", "needs": ["fetch"], "approval": {"message": "ok?"}},
                ],
                "finally": [{"id": "tell", "action": "notify.slack"}],
            },
            "steps": [
                {"id": "fetch", "phase": "Succeeded", "attempt": 2, "output": {"n": 3},
                 "history": [{"attempt": 1, "errorClass": "transient", "message": "503", "extra": "dropped"}]},
                {"id": "review", "phase": "Running", "approvalName": "r1-review"},
            ],
            **status,
        },
    }


def test_run_detail_has_every_step_with_its_state_and_edges() -> None:
    detail = views.run_detail(run_tree(run()))
    steps = {step["id"]: step for step in detail["steps"]}
    assert list(steps) == ["fetch", "review", "tell"]
    assert steps["review"]["needs"] == ["fetch"] and steps["review"]["kind"] == "approval"
    assert steps["tell"]["section"] == "finally" and steps["tell"]["phase"] == "Pending"
    assert steps["fetch"]["output"] == {"n": 3} and steps["fetch"]["credentials"] == ["crm-api"]
    assert steps["fetch"]["history"][0]["errorClass"] == "transient"
    assert "extra" not in steps["fetch"]["history"][0]


def test_run_summary_copies_named_fields_only() -> None:
    summary = views.run_summary(run())
    assert summary["workflow"] == "wf" and summary["requestedBy"] == "carol" and summary["phase"] == "Running"
    assert "managedFields" not in str(summary)


def test_a_run_before_the_operator_saw_it_is_pending_with_no_steps() -> None:
    bare = {"metadata": {"name": "r0"}, "spec": {"workflowRef": {"name": "wf"}}}
    detail = views.run_detail(run_tree(bare))
    assert detail["phase"] == "Pending" and detail["steps"] == []


def test_workflow_summary_lists_manual_and_declared_triggers_and_readiness() -> None:
    workflow = {
        "metadata": {"name": "wf"},
        "spec": {"steps": [{"id": "a"}], "triggers": [
            {"name": "daily", "schedule": {"cron": "0 8 * * *", "timeZone": "Europe/Berlin"}},
            {"name": "hook", "webhook": {"verify": {"scheme": "github"}}}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Valid"}],
                   "nextScheduleTime": "2026-12-02T07:00:00Z"},
    }
    summary = views.workflow_summary(workflow)
    assert [t["name"] for t in summary["triggers"]] == ["manual", "daily", "hook"]
    daily, hook = summary["triggers"][1:]
    assert daily["detail"] == "schedule 0 8 * * * (Europe/Berlin, Allow)" and daily["cron"] == "0 8 * * *"
    assert hook["path"] == "/hooks//wf/hook" and hook["scheme"] == "github"
    assert summary["ready"]["status"] == "True" and summary["nextScheduleTime"] == "2026-12-02T07:00:00Z"


def test_a_webhooks_url_is_its_path_at_the_webhook_ingresss_origin_when_the_view_knows_it() -> None:
    workflow = {"metadata": {"name": "wf", "namespace": "team"}, "spec": {"steps": [{"id": "a"}], "triggers": [
        {"name": "daily", "schedule": {"cron": "0 8 * * *"}},
        {"name": "push", "webhook": {"verify": {"scheme": "github"}}}]}}
    shown = views.workflow_detail(workflow, [], webhook_url="https://hooks.example.com/")
    assert {t["name"]: t["url"] for t in shown["triggers"]} == {
        "manual": None, "daily": None, "push": "https://hooks.example.com/hooks/team/wf/push"}
    assert all(t["url"] is None for t in views.workflow_detail(workflow, [])["triggers"]), "no origin: no URL"


def test_an_approval_says_whether_its_message_quotes_the_runs_inputs() -> None:
    """The approvals page heads such a card with Towline's own question, never with the message."""
    def approval(spec: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "r-review"}, "spec": {"runName": "r", "step": "review", **spec}}

    quoted = views.approval_view(approval({"message": "<!channel> Approve here", "messageFromInputs": True}))
    assert quoted["messageFromInputs"] is True and quoted["message"] == "<!channel> Approve here"
    assert views.approval_view(approval({"message": "Ship it?"}))["messageFromInputs"] is False
