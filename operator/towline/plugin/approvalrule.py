"""Who may decide an Approval: the admission policy's own CEL, evaluated by `approvals --mine`.

The API server decides with the chart's approval-decisions ValidatingAdmissionPolicy.
`approvals --mine` must never show a gate the server would then refuse (nor hide one
it would allow), so it evaluates the very same expressions: DECISION_RULES is the
text of every validation of that policy that applies to a decision, and a unit test
holds it equal to the chart's. They are evaluated against the same variables the API
server binds: `request.userInfo` from a SelfSubjectReview (name and groups),
`oldObject` the Approval as stored, `object` that Approval with the patch
`kubectl towline approve` sends (decision and decidedBy set to the user's own name).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

from towline.expressions import ExpressionError, evaluate
from towline.jsontypes import JSON

DECISION_RULES: tuple[str, ...] = (
    "!variables.deciding || !variables.isOperator",
    "!variables.deciding || (has(object.spec.decidedBy) && object.spec.decidedBy == request.userInfo.username)",
    "!variables.deciding || "
    "(has(object.spec.approvers.users) && request.userInfo.username in object.spec.approvers.users) || "
    "(has(object.spec.approvers.groups) && object.spec.approvers.groups.exists(g, g in request.userInfo.groups))",
    "!variables.deciding || !object.spec.fourEyes || "
    "(has(object.spec.requestedBy) && object.spec.requestedBy != request.userInfo.username)",
    "!variables.deciding || !object.spec.fourEyes || !has(object.spec.earlierRequesters) || "
    "!(request.userInfo.username in object.spec.earlierRequesters)",
    "!variables.deciding || !has(oldObject.status) || !has(oldObject.status.phase) || "
    "oldObject.status.phase == 'Pending'",
)
"""The policy's validations that guard a decision (those reading `variables.deciding`), verbatim."""


@dataclass(frozen=True)
class User:
    """Who the API server says the caller is."""

    name: str
    groups: tuple[str, ...] = ()


def decision_patch(user: str, decision: str, reason: str | None = None) -> JSON:
    """The `spec` merge patch `approve`/`reject` sends: the decision and the decider's own name."""
    spec: JSON = {"decision": decision, "decidedBy": user}
    if reason:
        spec["reason"] = reason
    return spec


def may_decide(approval: JSON, user: User) -> bool:
    """Whether the admission policy admits `user` deciding `approval` with `decision_patch`.

    A rule that cannot be evaluated (a field the server would have defaulted is missing) counts
    as a refusal, as the policy's failurePolicy Fail makes it on the server.
    """
    if approval.get("spec", {}).get("decision") or approval.get("spec", {}).get("decidedBy"):
        return False  # decided already: the CRD keeps a decision final
    after = copy.deepcopy(approval)
    after.setdefault("spec", {}).update(decision_patch(user.name, "Approved"))
    context = {
        "request": {"operation": "UPDATE", "userInfo": {"username": user.name, "groups": list(user.groups)}},
        "object": after,
        "oldObject": approval,
        # A person, not the operator, decides (the operator's own identity may decide nothing).
        "variables": {"deciding": True, "isOperator": False},
    }
    return all(_holds(rule, context) for rule in DECISION_RULES)


def _holds(rule: str, context: JSON) -> bool:
    try:
        return evaluate(rule, context) is True
    except ExpressionError:
        return False


def mine(approvals: Sequence[JSON], user: User) -> list[JSON]:
    return [approval for approval in approvals if may_decide(approval, user)]
