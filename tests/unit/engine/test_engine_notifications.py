"""Approval notifications: one Job per gate, entry and event, even when a pass is replayed after a crash."""

from __future__ import annotations

import shlex
from datetime import timedelta

from engine_harness import Sim, action, workflow

from towline.api.common import Approvers
from towline.api.run import WorkflowRunStatus
from towline.engine import CreateNotificationJob
from towline.engine.naming import STEP_JOB_PREFIX, job_name, notification_job_name
from towline.engine.notifications import approvers_text
from towline.plugin.cli import build_parser

REVIEW = {
    "id": "review", "needs": ["load"],
    "approval": {"message": "Create the tasks?", "approvers": {"users": ["bob"], "groups": ["account-managers"]},
                 "expiresAfter": "1h"},
}
HOOK = {"events": ["opened", "decided", "expired"], "action": "webhook.send",
        "with": {"url": "https://hooks.example.com/approvals"}, "credentials": {"webhook": "approvals-hook"}}
SLACK = {"events": ["opened"], "action": "notify.slack", "credentials": {"slack": "ops-slack"}}


def gated_run(*notifications: dict[str, object]) -> Sim:
    sim = Sim(workflow([action("load"), REVIEW, action("after", "review")],
                       approvalNotifications=list(notifications)))
    sim.reconcile()
    sim.finish("load")
    return sim


def notifications(sim: Sim) -> list[CreateNotificationJob]:
    return [item for item in sim.actions if isinstance(item, CreateNotificationJob)]


def test_an_opened_gate_asks_for_one_notification_per_entry_and_records_it() -> None:
    sim = gated_run(HOOK, SLACK)
    sim.reconcile()
    sent = notifications(sim)
    assert [(n.event, n.index, n.action) for n in sent] == [
        ("opened", 0, "webhook.send"), ("opened", 1, "notify.slack")]
    assert [(r.event, r.index, r.job_name) for r in sim.step("review").notifications or []] == [
        ("opened", 0, sent[0].job_name), ("opened", 1, sent[1].job_name)]
    sim.reconcile()
    assert len(notifications(sim)) == 2, "a recorded notification is not asked for again"


def test_a_pass_replayed_after_a_crash_asks_for_the_same_job_name() -> None:
    sim = gated_run(HOOK)
    sim.reconcile(persist=False)  # crash between creating the Job and writing status
    sim.reconcile()
    sent = notifications(sim)
    assert len(sent) == 2 and sent[0].job_name == sent[1].job_name, "the second create is a 409 on the same name"
    assert sent[0].idempotency_key == sent[1].idempotency_key
    assert len(sim.step("review").notifications or []) == 1


def test_decided_and_expired_gates_are_announced_once_each() -> None:
    decided = gated_run(HOOK)
    decided.reconcile()
    decided.decide_approval("review", "Rejected", by="bob", reason="not during the freeze")
    decided.reconcile()
    decided.reconcile()
    events = [n.event for n in notifications(decided)]
    assert events == ["opened", "decided"]
    payload = notifications(decided)[1].inputs["payload"]
    assert (payload["event"], payload["decision"], payload["decidedBy"]) == ("approval.decided", "Rejected", "bob")
    assert "rejected by bob: not during the freeze" in payload["text"]

    expired = gated_run(HOOK)
    expired.reconcile()
    expired.advance(timedelta(hours=1).total_seconds())
    expired.reconcile()
    assert [n.event for n in notifications(expired)] == ["opened", "expired"]
    assert "expired at 2026-11-30T09:00:00Z without a decision" in notifications(expired)[1].inputs["payload"]["text"]


def test_an_entry_announces_only_the_events_it_lists() -> None:
    sim = gated_run(SLACK)
    sim.reconcile()
    sim.decide_approval("review", "Approved")
    sim.reconcile()
    assert [n.event for n in notifications(sim)] == ["opened"]


def test_the_opened_message_names_run_step_approvers_expiry_and_the_command() -> None:
    sim = gated_run(SLACK)
    sim.reconcile()
    text = notifications(sim)[0].inputs["text"]
    for part in ("run renewal-watch-1", "workflow renewal-watch", "step review", "Create the tasks?",
                 "users bob; groups account-managers", "Expires at 2026-11-30T09:00:00Z",
                 "kubectl towline -n sales-ops approve renewal-watch-1-review",
                 "kubectl -n sales-ops patch approval renewal-watch-1-review --type merge"):
        assert part in text, part


def test_with_a_web_view_the_opened_message_links_to_the_approval_page_and_keeps_the_commands() -> None:
    sim = gated_run(SLACK, HOOK)
    sim.web_view_url = "https://towline.example.com"
    sim.reconcile()
    slack, hook = notifications(sim)
    link = "https://towline.example.com/ns/sales-ops/approvals/renewal-watch-1-review"
    assert f"Decide at {link} or approve with: kubectl towline -n sales-ops approve" in slack.inputs["text"]
    assert hook.inputs["payload"]["url"] == link


def test_without_a_web_view_the_message_carries_commands_only() -> None:
    sim = gated_run(HOOK)
    sim.reconcile()
    payload = notifications(sim)[0].inputs["payload"]
    assert "url" not in payload and "Decide at" not in payload["text"]


def test_credentials_are_secret_names_and_the_hosts_come_from_the_workflow() -> None:
    sim = gated_run({**HOOK, "allowHosts": ["hooks.example.com"]})
    sim.reconcile()
    sent = notifications(sim)[0]
    assert sent.credentials == {"webhook": "approvals-hook"}
    assert sent.allow_hosts == ("hooks.example.com",)
    assert sent.inputs["url"] == "https://hooks.example.com/approvals"


def test_a_gate_without_notifications_asks_for_none() -> None:
    sim = gated_run()
    sim.reconcile()
    sim.decide_approval("review", "Approved")
    sim.reconcile()
    assert notifications(sim) == [] and sim.step("review").notifications is None


def test_notification_job_names_are_step_job_names_that_no_step_attempt_can_take() -> None:
    name = notification_job_name("run-1", "review", "decided", 2)
    assert name == "towline-step-run-1-review-notify2-decided"
    assert name.startswith(STEP_JOB_PREFIX) and not name.rsplit("-", 1)[1].isdigit()
    assert job_name("run-1-review-notify2", "decided", 1) != name
    long_name = notification_job_name("r" * 60, "a_very_long_step_id_" * 3, "expired", 9)
    assert len(long_name) <= 63 and long_name.endswith("-notify9-expired")


def test_with_credentials_and_no_allow_hosts_the_pod_may_reach_only_the_host_its_url_names() -> None:
    sim = gated_run(HOOK)
    sim.reconcile()
    assert notifications(sim)[0].allow_hosts == ("hooks.example.com",)


def test_the_approve_command_is_one_the_plugin_accepts() -> None:
    sim = gated_run(HOOK)
    sim.reconcile()
    command = notifications(sim)[0].inputs["payload"]["approveCommand"]
    assert command.startswith("kubectl towline ")
    args = build_parser().parse_args(shlex.split(command.removeprefix("kubectl towline ")))
    parsed = (args.namespace, args.command, args.name, args.step)
    assert parsed == ("sales-ops", "approve", "renewal-watch-1-review", None)


def test_a_gate_without_approvers_is_announced_as_decidable_by_nobody() -> None:
    # The chart's admission policy admits a decision only from a listed user or group member.
    assert approvers_text(Approvers()) == "nobody (the gate lists no user or group)"


def test_a_step_recorded_by_a_release_without_notifications_is_written_back_unchanged() -> None:
    """An upgrade must not touch finished steps: the wire form gains no empty `notifications` list."""
    sim = gated_run()
    sim.reconcile()
    sim.decide_approval("review", "Approved")
    sim.reconcile()
    wire = sim.status.to_wire()
    steps = wire["steps"]
    assert isinstance(steps, list) and steps
    assert all("notifications" not in step for step in steps), steps
    assert WorkflowRunStatus.model_validate(wire).to_wire() == wire


def test_a_run_copied_before_the_rename_announces_its_on_events_and_is_written_back_with_events() -> None:
    sim = gated_run({"on": ["opened"], "action": "notify.slack", "credentials": {"slack": "ops-slack"}})
    sim.reconcile()
    assert [(n.event, n.action) for n in notifications(sim)] == [("opened", "notify.slack")]
    snapshot = sim.status.to_wire()["workflowSpec"]
    assert snapshot["approvalNotifications"][0]["events"] == ["opened"]
    assert "on" not in snapshot["approvalNotifications"][0]
