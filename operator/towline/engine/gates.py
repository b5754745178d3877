"""Steps that are not Jobs: approval gates (written or inserted by policy) and waits.

A gate creates one Approval (or adopts the one a crash left behind, keeping its
original expiry), then reads the decision: approved, rejected, or expired by
the wall clock, also while the run is suspended (a person must not approve a
request the run has given up on). The preview an approver sees names the
gated steps' actions, their rendered inputs and credential references: never
credential values.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from towline.api.common import Approvers, parse_duration
from towline.api.run import StepStatus
from towline.api.runterms import DECISIONS, Closing
from towline.api.workflow import ApprovalGate, ApprovalPolicy, Step
from towline.engine.actions import CloseApproval, CreateApproval, RecordApprovalDecision
from towline.engine.naming import approval_name
from towline.engine.notifications import GateFacts, notification_action, owed_notifications, record
from towline.engine.observed import ApprovalObservation
from towline.engine.phases import transition_step
from towline.engine.steps import StepDriver
from towline.expressions import ExpressionError
from towline_connectors.wire import is_template, rfc3339


class Gates:
    """Approval and wait steps, moved with the same driver (shared actions, events and state)."""

    def __init__(self, driver: StepDriver) -> None:
        self.driver = driver

    # --- approval gates --------------------------------------------------------------

    def open_gate(self, entry_id: str, gate: Step, gated: list[str]) -> None:
        """Request a decision (or adopt the Approval a crash left behind), then check it at once."""
        assert gate.approval is not None
        observation = self.driver.observed.approvals.get(entry_id)
        message = ""
        if observation is None:
            try:
                message = self.driver.bindings.text(gate.approval.message, entry_id) if gate.approval.message else ""
            except ExpressionError as error:
                self.driver.fail_before_start(entry_id, error)
                return
        entry = self.driver.state.edit(entry_id)
        transition_step(entry, "Running", at=self.driver.now)
        entry.approval_name = observation.name if observation else approval_name(self.driver.run.name, entry_id)
        entry.expires_at = (observation.expires_at if observation else None) or (
            self.driver.now + parse_duration(gate.approval.expires_after)
        )
        if observation is None:
            self.driver.actions.append(CreateApproval(
                step_id=entry_id, name=entry.approval_name, message=message, preview=self.preview(gated),
                approvers=gate.approval.approvers, four_eyes=gate.approval.four_eyes,
                requested_by=self.driver.run.spec.requested_by, expires_at=entry.expires_at,
                earlier_requesters=tuple(self.driver.state.status.earlier_requesters),
                message_from_inputs=is_template(gate.approval.message),
            ))
            self.driver.event("Normal", "ApprovalRequested",
                       f"approval {entry.approval_name} requested before {', '.join(gated) or 'the next steps'}; "
                       f"expires at {rfc3339(entry.expires_at)}")
        self.observe_approval(entry_id)

    def preview(self, gated: list[str]) -> dict[str, Any]:
        """What the gated steps will do: action, inputs (rendered when possible), credential references."""
        steps = []
        for step_id in gated:
            step = self.driver.state.graph.steps[step_id]
            if step.action is None:
                continue
            try:
                inputs, rendered = self.driver.bindings.inputs(step), True
            except ExpressionError:
                inputs, rendered = dict(step.with_), False
            steps.append({
                "id": step_id, "action": step.action, "with": inputs, "rendered": rendered,
                "credentials": dict(step.credentials),
            })
        return {"steps": steps}

    def observe_approval(self, entry_id: str) -> None:
        """Approved, rejected, or expired by the wall clock (also while the run is suspended)."""
        entry = self.driver.state.get(entry_id)
        assert entry is not None and entry.phase == "Running"
        observation = self.driver.observed.approvals.get(entry_id)
        decision = observation.decision if observation is not None else None
        # When a decision was made is what the operator recorded, or now, when it first sees it:
        # never a time the decider could write.
        decided_at = (observation.decided_at if observation is not None else None) or self.driver.now
        if decision is not None and entry.expires_at is not None and decided_at >= entry.expires_at:
            decision = None  # seen only after it expired: too late to count
        if observation is not None and decision == "Approved" and self.approved_by_a_requester(entry_id, observation):
            self.refuse_own_approval(entry_id, observation.decided_by)
            return
        if observation is not None and decision is not None:
            edited = self.driver.state.edit(entry_id)
            edited.decided_by = observation.decided_by
            who = observation.decided_by or "an unnamed approver"
            why = f": {observation.reason}" if observation.reason else ""
            message = f"{decision.lower()} by {who}{why}"
            assert entry.approval_name is not None
            self.driver.actions.append(RecordApprovalDecision(entry.approval_name, decision, decided_at))
            if decision == "Approved":
                transition_step(edited, "Succeeded", at=decided_at, reason="Approved", message=message)
                self.driver.event("Normal", "ApprovalApproved", f"approval {entry.approval_name} {edited.message}")
            else:
                transition_step(edited, "Failed", at=decided_at, reason="Rejected", message=message)
                self.driver.event("Warning", "ApprovalRejected", f"approval {entry.approval_name} {edited.message}")
                self.driver.after_failure(entry_id)
            return
        if entry.expires_at is not None and self.driver.now >= entry.expires_at:
            self.close_and_fail(entry_id, "Expired", reason="Expired", event_reason="ApprovalExpired",
                                message=f"approval expired at {rfc3339(entry.expires_at)} without a decision")

    def approved_by_a_requester(self, entry_id: str, observation: ApprovalObservation) -> bool:
        """A four-eyes gate approved by whoever requested this run or a run it retries (admission refuses it too)."""
        gate = self.driver.state.graph.steps.get(entry_id)
        if gate is None or gate.approval is None or not gate.approval.four_eyes:
            return False
        requesters = {self.driver.run.spec.requested_by, *self.driver.state.status.earlier_requesters}
        return observation.decided_by in requesters - {None}

    def refuse_own_approval(self, entry_id: str, who: str | None) -> None:
        self.close_and_fail(
            entry_id, "Cancelled", reason="FourEyes", event_reason="ApprovalNotCounted",
            message=f"approved by {who}, who requested this run or a run it retries; four-eyes does not count it",
        )

    def close_and_fail(self, entry_id: str, closed_as: Closing, *, reason: str,
                       event_reason: str, message: str) -> None:
        """The gate fails now: its Approval is closed (`closed_as`) so nobody decides it any more, and a Warning
        Event says why."""
        edited = self.driver.state.edit(entry_id)
        assert edited.approval_name is not None
        self.driver.actions.append(CloseApproval(edited.approval_name, closed_as))
        transition_step(edited, "Failed", at=self.driver.now, reason=reason, message=message)
        self.driver.event("Warning", event_reason, f"approval {edited.approval_name}: {edited.message}")
        self.driver.after_failure(entry_id)

    # --- notifications ------------------------------------------------------------------

    def announce(self) -> None:
        """Ask for every announcement a gate owes and record it (towline.engine.notifications)."""
        snapshot = self.driver.run.status.workflow_spec
        notifications = (snapshot.approval_notifications if snapshot is not None else None) or []
        if not notifications:
            return
        for entry in self.driver.state.entries():
            owed = owed_notifications(entry, notifications, run_name=self.driver.run.name)
            if not owed:
                continue
            facts = self.gate_facts(entry)
            edited = self.driver.state.edit(entry.id)
            for index, event, notification, job_name in owed:
                self.driver.actions.append(
                    notification_action(facts, event, index, notification, job_name, run_uid=self.driver.run.uid,
                                        catalog=self.driver.catalog)
                )
                record(edited, event, index, action=notification.action, job_name=job_name, now=self.driver.now)

    def gate_facts(self, entry: StepStatus) -> GateFacts:
        graph = self.driver.state.graph
        gate = graph.steps.get(entry.id) or (graph.gate_step(entry.gate_for) if entry.gate_for else None)
        approvers = gate.approval.approvers if gate is not None and gate.approval is not None else Approvers()
        observation = self.driver.observed.approvals.get(entry.id)
        requested = next((action for action in self.driver.actions
                          if isinstance(action, CreateApproval) and action.step_id == entry.id), None)
        message = requested.message if requested is not None else (observation.message if observation else "")
        decision = entry.reason if entry.reason in DECISIONS else None
        assert entry.approval_name is not None
        return GateFacts(
            namespace=self.driver.run.namespace, run=self.driver.run.name, workflow=self.driver.run.workflow_name,
            step=entry.id, approval=entry.approval_name, message=message, approvers=approvers,
            message_from_inputs=gate is not None and gate.approval is not None and is_template(gate.approval.message),
            expires_at=entry.expires_at, decision=decision, decided_by=entry.decided_by,
            reason=observation.reason if observation is not None and decision is not None else None,
            web_view_url=self.driver.web_view_url,
        )

    # --- the policy's gate ----------------------------------------------------------------

    def approved_upstream(self, step_id: str, policy: ApprovalPolicy) -> bool:
        """An author-written gate directly upstream stands in for the policy's gate before `step_id`.

        Only a gate that actually passed (approved: not skipped by its `when`,
        not rejected) and is at least as strict as the policy: its approvers
        within the policy's, four eyes whenever the policy asks for them.
        """
        graph = self.driver.state.graph
        for need in graph.steps[step_id].needs:
            gate = graph.steps.get(need)
            entry = self.driver.state.get(need)
            if gate is None or gate.approval is None or entry is None:
                continue
            if entry.phase == "Succeeded" and entry.reason == "Approved" and at_least_as_strict(gate.approval, policy):
                return True
        return False

    # --- waits -----------------------------------------------------------------------

    def start_wait(self, step_id: str, step: Step) -> None:
        assert step.wait is not None
        try:
            if step.wait.until:
                wake_at = self.driver.bindings.time(step.wait.until, step_id)
            else:
                wake_at = self.driver.now + (parse_duration(step.wait.duration) if step.wait.duration else timedelta())
        except ExpressionError as error:
            self.driver.fail_before_start(step_id, error)
            return
        entry = self.driver.state.edit(step_id)
        transition_step(entry, "Running", at=self.driver.now)
        entry.wake_at = wake_at
        self.observe_wait(step_id)

    def observe_wait(self, step_id: str) -> None:
        entry = self.driver.state.get(step_id)
        assert entry is not None and entry.wake_at is not None
        if self.driver.now >= entry.wake_at:
            edited = self.driver.state.edit(step_id)
            transition_step(edited, "Succeeded", at=self.driver.now, reason="WaitOver")


def at_least_as_strict(gate: ApprovalGate, policy: ApprovalPolicy) -> bool:
    """Everyone who may decide `gate` may also decide the policy's gate, and four eyes hold if asked for."""
    return (gate.four_eyes or not policy.four_eyes) and _within(gate.approvers, policy.approvers)


def _within(inner: Approvers, outer: Approvers) -> bool:
    # Group membership is known only to the API server, so a listed user counts only if the policy
    # lists that user too, and a group only if the policy lists that group.
    return set(inner.users) <= set(outer.users) and set(inner.groups) <= set(outer.groups)
