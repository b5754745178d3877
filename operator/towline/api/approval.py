"""The Approval resource: a human decision at a gate, recorded truthfully.

Created by the operator, owned by its run. A person decides with
`kubectl patch approval NAME --type merge -p '{"spec":{"decision":"Approved","decidedBy":"bob"}}'`;
the chart's ValidatingAdmissionPolicy checks that `decidedBy` is the requesting
user, that they are an allowed approver, that four-eyes runs are not approved by
their requester, and that a decision is final.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from towline.api.common import Approvers, Condition, Identifier, ObjectName, TowlineModel

Decision = Literal["Approved", "Rejected"]
ApprovalPhase = Literal["Pending", "Approved", "Rejected", "Expired", "Cancelled"]


class ApprovalSpec(TowlineModel):
    run_name: ObjectName
    workflow_name: ObjectName
    step: Identifier
    message: str = Field(default="", max_length=4096)
    preview: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="What the next step will do, with credential references only.",
    )
    approvers: Approvers = Field(default_factory=Approvers)
    four_eyes: bool = False
    requested_by: str | None = Field(default=None, max_length=253)
    expires_at: datetime
    decision: Decision | None = None
    decided_by: str | None = Field(default=None, max_length=253)
    reason: str | None = Field(default=None, max_length=1024)


class ApprovalStatus(TowlineModel):
    phase: ApprovalPhase = "Pending"
    decided_at: datetime | None = None
    conditions: list[Condition] = Field(default_factory=list)


class Approval(TowlineModel):
    api_version: Literal["towline.dev/v1alpha1"] = "towline.dev/v1alpha1"
    kind: Literal["Approval"] = "Approval"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ApprovalSpec
    status: ApprovalStatus | None = None
