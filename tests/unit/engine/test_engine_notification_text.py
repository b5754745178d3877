"""A gate's message bound from a run's params reaches each channel escaped for it and marked as the run's words.

The attacker starts a run (or sends the webhook that starts it) with a param
the gate's message quotes; they want a Slack mention of the whole channel, a
link under words of their choosing, or terminal escapes in an email body.
"""

from __future__ import annotations

from typing import Any

from engine_harness import Sim, action, workflow

from towline.engine import CreateNotificationJob

HOSTILE = "<!channel> <https://evil.example/approve|Approve here> & \x1b]0;owned\x07\x1b[2J\x9b31m"
SLACK: dict[str, Any] = {"events": ["opened"], "action": "notify.slack", "credentials": {"slack": "ops-slack"}}
EMAIL: dict[str, Any] = {"events": ["opened"], "action": "notify.email", "credentials": {"smtp": "ops-smtp"},
         "with": {"host": "smtp.example.com", "from": "towline@example.com", "to": ["ops@example.com"]}}
HOOK: dict[str, Any] = {"events": ["opened"], "action": "webhook.send", "with": {"url": "https://hooks.example.com/approvals"},
        "credentials": {"webhook": "approvals-hook"}}


def gate(message: str, *notifications: dict[str, Any], note: str = HOSTILE) -> Sim:
    review = {"id": "review", "needs": ["load"], "approval": {"message": message, "approvers": {"users": ["bob"]}}}
    sim = Sim(workflow([action("load"), review, action("after", "review")], params=[{"name": "note"}],
                       approvalNotifications=list(notifications)), params={"note": note})
    sim.reconcile()
    sim.finish("load")
    sim.reconcile()
    return sim


def sent(sim: Sim) -> list[CreateNotificationJob]:
    return [item for item in sim.actions if isinstance(item, CreateNotificationJob)]


def test_slack_gets_a_bound_message_with_mrkdwn_escaped_and_quoted_as_the_runs_inputs() -> None:
    text = sent(gate("Ship it? ${{ params.note }}", SLACK))[0].inputs["text"]
    assert "<!channel>" not in text and "<https://" not in text and "|Approve here>" not in text
    assert "&lt;!channel&gt; &lt;https://evil.example/approve|Approve here&gt; &amp;" in text
    assert "quoting the run's inputs (not written by the Workflow's author)" in text
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text


def test_slack_escapes_even_an_authors_literal_message() -> None:
    text = sent(gate("Ship <!here>?", SLACK))[0].inputs["text"]
    assert "&lt;!here&gt;" in text and "<!here>" not in text
    assert "quoting the run's inputs" not in text


def test_an_email_body_carries_no_terminal_escapes() -> None:
    inputs = sent(gate("Ship it? ${{ params.note }}", EMAIL))[0].inputs
    assert "\x1b" not in inputs["text"] and "\x07" not in inputs["text"] and "\x9b" not in inputs["text"]
    assert "<!channel>" in inputs["text"], "plain text needs no mrkdwn escaping"
    assert "quoting the run's inputs" in inputs["text"]
    assert "owned" not in inputs["subject"] and "channel" not in inputs["subject"]


def test_a_json_receiver_gets_the_message_as_data_and_where_it_came_from() -> None:
    payload = sent(gate("Ship it? ${{ params.note }}", HOOK))[0].inputs["payload"]
    assert payload["message"] == f"Ship it? {HOSTILE}"
    assert payload["messageFromInputs"] is True


def test_the_approval_says_its_message_quotes_the_runs_inputs_only_when_it_binds_them() -> None:
    assert gate("Ship it? ${{ params.note }}").requested[0].message_from_inputs is True
    assert gate("Ship it?").requested[0].message_from_inputs is False
