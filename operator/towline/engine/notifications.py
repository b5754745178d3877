"""Approval notifications: which announcements a pass owes, and what they say.

Pure. Every pass looks at each approval gate's recorded state (opened, decided,
expired) and, for each `spec.approvalNotifications` entry that asks for that
event and is not yet recorded on the gate's status, asks for one notification
Job and records it. The record is written with the status at the end of the
pass; after a crash before that write the next pass asks again, and the Job's
deterministic name makes the second create a 409 that adopts the first: one
delivery per gate, entry and event, across restarts and leader changes.

The message names the run, the step, who may decide, when the gate expires and
the exact command to decide; never a credential value (a notification's
credentials are Secret names, mounted only into its own pod). A gate's message
that binds run values (params, trigger data, step outputs) is partly written by
whoever started the run: it is quoted as such, and each channel gets the text
in its own escaping (Slack mrkdwn, a terminal-safe email body, JSON as data).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from towline.api.common import Approvers
from towline.api.run import NotificationRecord, StepStatus
from towline.api.runterms import DECISIONS
from towline.api.workflow import ApprovalEvent, ApprovalNotification
from towline.engine.actions import CreateNotificationJob
from towline.engine.idempotency import KEY_PREFIX
from towline.engine.naming import notification_job_name
from towline.safetext import printable, slack_mrkdwn
from towline.validation.actions import ActionCatalog
from towline.validation.notifications import with_message
from towline_connectors.wire import rfc3339

Event = ApprovalEvent


@dataclass(frozen=True)
class GateFacts:
    """What a notification says about one gate."""

    namespace: str
    run: str
    workflow: str
    step: str
    approval: str
    message: str
    approvers: Approvers
    expires_at: datetime | None
    decision: str | None = None
    decided_by: str | None = None
    reason: str | None = None
    message_from_inputs: bool = False
    """The gate's message binds run values: whoever started the run wrote part of it."""
    web_view_url: str | None = None
    """The web view's origin (the chart's ui.url): the message links to the approval's page there."""

    @property
    def link(self) -> str | None:
        """The approval's page in the web view (a stable deep link; sign-in returns to it), if there is a view."""
        if self.web_view_url is None:
            return None
        return f"{self.web_view_url}/ns/{self.namespace}/approvals/{self.approval}"


def gate_events(entry: StepStatus) -> list[Event]:
    """The events that have happened at a gate, as its status records them."""
    if entry.approval_name is None:
        return []
    events: list[Event] = ["opened"]
    if entry.reason in DECISIONS:
        events.append("decided")
    elif entry.reason == "Expired":
        events.append("expired")
    return events


def owed_notifications(
    entry: StepStatus, notifications: Sequence[ApprovalNotification], *, run_name: str,
) -> list[tuple[int, Event, ApprovalNotification, str]]:
    """(index, event, entry, Job name) of every announcement this gate owes and has not recorded."""
    recorded = {(record.index, record.event) for record in entry.notifications or []}
    owed = []
    for event in gate_events(entry):
        for index, notification in enumerate(notifications):
            if event in notification.events and (index, event) not in recorded:
                owed.append((index, event, notification, notification_job_name(run_name, entry.id, event, index)))
    return owed


def notification_action(
    facts: GateFacts, event: Event, index: int, notification: ApprovalNotification, job_name: str, *,
    run_uid: str, catalog: ActionCatalog,
) -> CreateNotificationJob:
    """The Job that delivers one announcement, with the message filled into the action's inputs."""
    inputs = notification_inputs(notification, facts, event)
    return CreateNotificationJob(
        step_id=facts.step, event=event, index=index, job_name=job_name, action=notification.action,
        inputs=inputs, credentials=dict(notification.credentials),
        allow_hosts=notification_hosts(notification, inputs, catalog),
        idempotency_key=notification_key(facts.workflow, run_uid, facts.step, event, index),
    )


def notification_hosts(
    notification: ApprovalNotification, inputs: dict[str, Any], catalog: ActionCatalog
) -> tuple[str, ...]:
    """Where its pod may connect: its allowHosts, else (with credentials) the literal hosts its inputs name.

    Inputs are literal (validation refuses bindings), so every host is known; as for a step, a pod with
    credentials never talks to a host the Workflow does not fix.
    """
    if notification.allow_hosts:
        return tuple(notification.allow_hosts)
    if not notification.credentials:
        return ()
    hosts = catalog.destination_hosts(notification.action, inputs)
    return tuple(dict.fromkeys(host for host in hosts if host is not None))


def record(entry: StepStatus, event: Event, index: int, *, action: str, job_name: str, now: datetime) -> None:
    """Note the announcement on the gate's status (a new list: the entry's copy is shallow)."""
    entry.notifications = [
        *(entry.notifications or []),
        NotificationRecord(event=event, index=index, action=action, job_name=job_name, created_at=now),
    ]


def notification_key(workflow: str, run_uid: str, step_id: str, event: str, index: int) -> str:
    """The same for every create of one announcement: a receiver that deduplicates sees it once."""
    digest = hashlib.sha256(f"{workflow}/{run_uid}/{step_id}/notify/{event}/{index}".encode()).hexdigest()
    return KEY_PREFIX + digest[:40]


def notification_inputs(notification: ApprovalNotification, facts: GateFacts, event: Event) -> dict[str, Any]:
    """The author's inputs plus the message, as text and (for a webhook or HTTP receiver) as JSON."""
    text = message_text(facts, event)
    inputs = with_message(notification, CHANNEL_TEXT.get(notification.action, str)(text),
                          message_document(facts, event))
    if notification.action == "notify.email" and "subject" not in notification.with_:
        inputs["subject"] = subject_line(facts, event)
    return inputs


CHANNEL_TEXT = {"notify.slack": slack_mrkdwn, "notify.email": printable}
"""The message as each channel must receive it: Slack reads mrkdwn (`<!channel>` is a mention, `<url|words>` a
link), a plain-text email may be read in a terminal. JSON receivers get the text as data, unchanged."""


def approve_command(facts: GateFacts) -> str:
    return f"kubectl towline -n {facts.namespace} approve {facts.approval}"


def patch_command(facts: GateFacts) -> str:
    body = '{"spec":{"decision":"Approved","decidedBy":"YOUR-USER-NAME"}}'
    return f"kubectl -n {facts.namespace} patch approval {facts.approval} --type merge -p '{body}'"


def subject_line(facts: GateFacts, event: Event) -> str:
    what = {"opened": "approval requested", "decided": f"{(facts.decision or 'decided').lower()}",
            "expired": "approval expired"}[event]
    return f"[towline] {facts.namespace}/{facts.run} step {facts.step}: {what}"


def approvers_text(approvers: Approvers) -> str:
    """Who may decide, in prose; with neither users nor groups the admission policy lets nobody decide."""
    parts = []
    if approvers.users:
        parts.append("users " + ", ".join(approvers.users))
    if approvers.groups:
        parts.append("groups " + ", ".join(approvers.groups))
    return "; ".join(parts) or "nobody (the gate lists no user or group)"


def message_text(facts: GateFacts, event: Event) -> str:
    """One readable paragraph per event; the opened one ends with the exact commands to decide."""
    where = f"run {facts.run} (workflow {facts.workflow}) in namespace {facts.namespace}, step {facts.step}"
    expiry = rfc3339(facts.expires_at, timespec="seconds") if facts.expires_at else "never"
    if event == "opened":
        asked = f" {facts.message}" if facts.message else ""
        if facts.message and facts.message_from_inputs:
            asked = (" The gate asks, quoting the run's inputs (not written by the Workflow's author): "
                     f'"{facts.message}".')

        decide = f"Decide at {facts.link} or approve with" if facts.link else "Approve with"
        return (
            f"Approval {facts.approval} requested for {where}.{asked} Approvers: {approvers_text(facts.approvers)}. "
            f"Expires at {expiry}. {decide}: {approve_command(facts)} "
            f"(reject: kubectl towline -n {facts.namespace} reject {facts.approval}), or: {patch_command(facts)}"
        )
    if event == "decided":
        why = f": {facts.reason}" if facts.reason else ""
        return (f"Approval {facts.approval} for {where} was {(facts.decision or 'decided').lower()} by "
                f"{facts.decided_by or 'an unnamed approver'}{why}.")
    return f"Approval {facts.approval} for {where} expired at {expiry} without a decision; the step failed."


def message_document(facts: GateFacts, event: Event) -> dict[str, Any]:
    """The same facts as JSON, for a webhook or HTTP receiver."""
    document: dict[str, Any] = {
        "event": f"approval.{event}",
        "namespace": facts.namespace,
        "workflow": facts.workflow,
        "run": facts.run,
        "step": facts.step,
        "approval": facts.approval,
        "approvers": facts.approvers.to_wire(),
        "expiresAt": rfc3339(facts.expires_at, timespec="seconds") if facts.expires_at else None,
        "approveCommand": approve_command(facts),
    }
    if facts.link:
        document["url"] = facts.link
    if event == "opened":
        document.update({"message": facts.message, "messageFromInputs": facts.message_from_inputs})
    if event == "decided":
        document.update({"decision": facts.decision, "decidedBy": facts.decided_by, "reason": facts.reason})
    return document
