"""The Approval resource: a human decision at a gate, recorded truthfully.

Created by the operator, owned by its run. A person decides with
`kubectl patch approval NAME --type merge -p '{"spec":{"decision":"Approved","decidedBy":"bob"}}'`;
the chart's ValidatingAdmissionPolicy checks that `decidedBy` is the requesting
user, that they are an allowed approver, that four-eyes runs are not approved by
their requester (nor a retry by the requesters of the runs it repeats), and that a
decision is final.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from towline.api.common import (
    MAX_EARLIER_REQUESTERS,
    Approvers,
    Conditions,
    FreeObject,
    ObjectName,
    TowlineModel,
    TowlineResource,
    UserName,
    cel_rule,
    cel_rules,
    final_once_set,
    immutable,
    only_beside,
    unchanged,
)
from towline.api.loops import InstanceId
from towline.api.runterms import ApprovalDecision, ApprovalPhase

APPROVERS_LINE_LIMIT = 512
"""Longest status.approvers; a longer list is cut with an ellipsis (spec.approvers keeps every name)."""

_SET_BY_OPERATOR = "the operator sets it when the run reaches the gate"
_FINAL = "a decision is final; start a new run to decide again"


class ApprovalSpec(TowlineModel):
    """The gate (set by the operator, immutable) and the decision (set once by an approver, then final)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            *(
                immutable(field, _SET_BY_OPERATOR)
                for field in (
                    "runName", "workflowName", "step", "message", "messageFromInputs", "preview",
                    "approvers", "fourEyes", "requestedBy", "earlierRequesters", "expiresAt",
                )
            ),
            final_once_set("decision", f"spec.decision cannot change once set; {_FINAL}"),
            final_once_set("decidedBy", f"spec.decidedBy cannot change once set; {_FINAL}"),
            cel_rule(
                f"!has(oldSelf.decision) || ({unchanged('reason')})",
                f"spec.reason cannot change after the decision; {_FINAL}",
                field_path=".reason",
            ),
            # decidedBy is final once set, so one set without a decision would leave the gate
            # impossible to decide (the admission policy checks the decider only with a decision).
            cel_rule(
                "has(self.decidedBy) == has(self.decision)",
                "set spec.decidedBy to your Kubernetes user name together with spec.decision, in one patch, "
                """e.g. -p '{"spec":{"decision":"Approved","decidedBy":"bob"}}'""",
                field_path=".decidedBy",
            ),
            only_beside("reason", "decision",
                        "spec.reason is the decider's; set it together with spec.decision and spec.decidedBy"),
        )
    )

    run_name: ObjectName = Field(description="The WorkflowRun waiting at the gate.")
    workflow_name: ObjectName = Field(description="That run's Workflow.")
    step: InstanceId = Field(description="The id of the gate's step (a loop instance's: step[index] or step[key]).")
    message: str = Field(default="", max_length=4096, description="What the approver is asked, bindings resolved.")
    message_from_inputs: bool = Field(
        default=False,
        description="The message quotes values bound from the run (its params, trigger data or step outputs): "
        "whoever started the run chose part of it, so the web view and notifications show it as such.",
    )
    preview: FreeObject = Field(
        default_factory=dict, max_length=64,
        description="What the next step will do, with credential references only.",
    )
    approvers: Approvers = Field(
        default_factory=Approvers, description="Who may decide: listed users, or members of listed groups.",
    )
    four_eyes: bool = Field(default=False, description="The run's requester may not approve.")
    requested_by: str | None = Field(default=None, max_length=253, description="Who requested the run.")
    earlier_requesters: list[UserName] = Field(
        default_factory=list, max_length=MAX_EARLIER_REQUESTERS,
        description="On a retry's gate: who requested the runs it repeats (their params); four-eyes refuses them too.",
    )
    expires_at: datetime = Field(description="After this, no decision is taken and the gate's step fails (Expired).")
    decision: ApprovalDecision | None = Field(default=None, description="Approved or Rejected; final once set.")
    decided_by: str | None = Field(
        default=None, max_length=253, description="Your Kubernetes user name; admission policy checks it."
    )
    reason: str | None = Field(default=None, max_length=1024, description="Why, in a sentence; kept for the audit.")


class ApprovalStatus(TowlineModel):
    """What became of the gate. Written only by the operator."""

    phase: ApprovalPhase = Field(default="Pending", description="Pending, Approved, Rejected, Expired or Cancelled.")
    decided_at: datetime | None = Field(default=None, description="When the operator saw the decision.")
    approvers: str | None = Field(
        default=None, max_length=APPROVERS_LINE_LIMIT,
        description="spec.approvers in one line for `kubectl get`, e.g. `alice, bob, group:sre`; `nobody` when "
        "neither users nor groups are listed.",
    )
    conditions: Conditions = Field(
        default_factory=list,
        description="Reserved for standard conditions; the outcome is in phase and decidedAt.",
    )


def approvers_line(approvers: Approvers) -> str:
    """`alice, bob, group:sre` (status.approvers, the APPROVERS column); `nobody` when none are listed."""
    names = [*approvers.users, *(f"group:{group}" for group in approvers.groups)]
    line = ", ".join(names) or "nobody"
    return line if len(line) <= APPROVERS_LINE_LIMIT else line[: APPROVERS_LINE_LIMIT - 1] + "…"


class Approval(TowlineResource):
    """A human decision at a run's approval gate, recorded truthfully and final once made."""

    kind: Literal["Approval"] = "Approval"
    spec: ApprovalSpec = Field(description="The gate (set by the operator) and the decision (set by an approver).")
    status: ApprovalStatus | None = Field(default=None, description="Written by the operator only.")
