"""spec.approvalNotifications: checked as the step its Job runs, against the real connectors' inputs."""

from __future__ import annotations

from typing import Any

from towline.api.workflow import ValidationError
from towline.validation import validate_workflow_manifest
from towline.validation.catalog import connector_catalog

STEPS = [{"id": "review", "approval": {"approvers": {"users": ["bob"]}}}]
HOOK = {"events": ["opened"], "action": "webhook.send", "with": {"url": "https://hooks.example.com/approvals"},
        "credentials": {"webhook": "approvals-hook"}}


def errors_of(*notifications: dict[str, Any]) -> list[ValidationError]:
    spec, errors = validate_workflow_manifest(
        {"steps": STEPS, "approvalNotifications": list(notifications)}, connector_catalog())
    assert spec is not None, errors
    return errors


def test_a_signed_webhook_notification_is_valid() -> None:
    assert errors_of(HOOK, {"events": ["decided", "expired"], "action": "notify.slack",
                            "credentials": {"slack": "ops-slack"}}) == []


def test_the_message_field_is_the_operators() -> None:
    errors = errors_of({**HOOK, "with": {**HOOK["with"], "payload": {"x": 1}}})
    assert [e.field for e in errors] == ["spec.approvalNotifications[0].with.payload"]
    assert "the operator writes the message of webhook.send (payload)" in errors[0].message
    assert "remove payload" in errors[0].message


def test_bindings_are_refused_with_the_field() -> None:
    errors = errors_of({**HOOK, "with": {"url": "https://${{ params.host }}/hook"}})
    assert [e.field for e in errors] == ["spec.approvalNotifications[0].with.url"]
    assert "literal" in errors[0].message


def test_the_connectors_input_checks_name_the_field() -> None:
    errors = errors_of({"events": ["opened"], "action": "notify.email", "with": {"host": "smtp.example.com"}})
    assert [(e.field, e.message) for e in errors] == [
        ("spec.approvalNotifications[0].with.from", "required; add it"),
        ("spec.approvalNotifications[0].with.to", "required; add it"),
    ], "subject and text are the operator's; the rest is the author's"


def test_a_credential_the_action_reads_must_be_declared() -> None:
    errors = errors_of({**HOOK, "credentials": {}})
    assert [e.field for e in errors] == ["spec.approvalNotifications[0].credentials"]
    assert "webhook.send reads credential 'webhook'" in errors[0].message
    assert "add it under spec.approvalNotifications[0].credentials" in errors[0].message


def test_an_unknown_action_is_refused_by_the_schema() -> None:
    spec, errors = validate_workflow_manifest(
        {"steps": STEPS, "approvalNotifications": [{**HOOK, "action": "ai.chat"}]}, connector_catalog())
    assert spec is None
    assert [e.field for e in errors] == ["spec.approvalNotifications[0].action"]
    assert "'notify.slack', 'notify.email', 'webhook.send' or 'http.request'" in errors[0].message


def test_an_entry_written_with_the_old_name_on_is_read_as_events() -> None:
    old = {key: value for key, value in HOOK.items() if key != "events"} | {"on": ["opened", "expired"]}
    spec, errors = validate_workflow_manifest({"steps": STEPS, "approvalNotifications": [old]}, connector_catalog())
    assert errors == [] and spec is not None
    (entry,) = spec.approval_notifications
    assert entry.events == ["opened", "expired"]
    assert entry.to_wire()["events"] == ["opened", "expired"] and "on" not in entry.to_wire()


def test_events_and_its_old_name_together_or_neither_is_an_error_naming_the_field() -> None:
    both = validate_workflow_manifest(
        {"steps": STEPS, "approvalNotifications": [{**HOOK, "on": ["decided"]}]}, connector_catalog())[1]
    assert [(e.field, e.message) for e in both] == [
        ("spec.approvalNotifications[0].on", "on is the old name of events: write events only")]
    neither = validate_workflow_manifest(
        {"steps": STEPS, "approvalNotifications": [{k: v for k, v in HOOK.items() if k != "events"}]},
        connector_catalog())[1]
    assert [e.field for e in neither] == ["spec.approvalNotifications[0].events"]
