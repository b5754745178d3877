"""Validate `spec.approvalNotifications`: each entry checked as the step its Job will run.

An entry's inputs are literal (no run to bind from where the Workflow is
checked, and a notification's destination must be fixed in the Workflow); the
operator writes the message field itself. With a sample message filled in, the
entry goes through the same action, credential and host checks as a step, so
its errors name the field and the fix the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from towline.api.workflow import ApprovalNotification, NotificationAction, Step, ValidationError, WorkflowSpec
from towline.expressions import string_leaves
from towline.validation.actions import ActionCatalog
from towline.validation.graph import LocatedStep
from towline.validation.steps import action_errors, credential_errors, host_errors
from towline_connectors.wire import is_template

MESSAGE_FIELDS: Mapping[NotificationAction, str] = {
    "notify.slack": "text",
    "notify.email": "text",
    "webhook.send": "payload",
    "http.request": "json",
}
"""The input of each notification action that carries the message: the operator writes it, the author may not."""

SECTION = "approvalNotifications"


def with_message(notification: ApprovalNotification, text: str, document: Mapping[str, Any]) -> dict[str, Any]:
    """The author's inputs plus the message (and, where the action needs them, a subject or a method)."""
    inputs = dict(notification.with_)
    field = MESSAGE_FIELDS[notification.action]
    inputs[field] = text if field == "text" else {**document, "text": text}
    if notification.action == "notify.email":
        inputs.setdefault("subject", text.split(". ", 1)[0][:200])
    if notification.action == "http.request":
        inputs.setdefault("method", "POST")
    return inputs


def notification_errors(spec: WorkflowSpec, catalog: ActionCatalog) -> list[ValidationError]:
    errors: list[ValidationError] = []
    for index, notification in enumerate(spec.approval_notifications):
        errors += _entry_errors(index, notification, catalog)
    return errors


def _entry_errors(index: int, notification: ApprovalNotification, catalog: ActionCatalog) -> list[ValidationError]:
    path = f"spec.{SECTION}[{index}]"
    field = MESSAGE_FIELDS[notification.action]
    errors = []
    if field in notification.with_:
        errors.append(ValidationError(
            field=f"{path}.with.{field}",
            message=f"the operator writes the message of {notification.action} ({field}): it names the run, step, "
            f"approvers, expiry and the command to decide; remove {field}",
        ))
    for where, text in string_leaves(notification.with_, f"{path}.with"):
        if is_template(text):
            errors.append(ValidationError(
                field=where,
                message="a notification's inputs are literal: there is no run to bind ${{ }} from, and where it "
                "goes is fixed in the Workflow; write the value itself",
            ))
    if errors:
        return errors
    sample = with_message(notification, "Approval requested. A sample message.", {"event": "approval.opened"})
    step = Step.model_validate({
        "id": f"notification_{index}", "action": notification.action, "with": sample,
        "credentials": dict(notification.credentials), "allowHosts": list(notification.allow_hosts),
    })
    item = LocatedStep(section=SECTION, index=index, step=step)
    return [*action_errors(item, catalog), *credential_errors(item, catalog), *host_errors(item, catalog)]
