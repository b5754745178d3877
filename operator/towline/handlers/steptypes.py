"""Reconcile one StepType or ClusterStepType: report in status whether workflows can use it.

`Ready` is True when the spec parses, its schemas are valid JSON Schema and the
chart's image policy allows its image; otherwise False with every reason, each
naming the field. Writes only `status`. The Workflows that may name the type
are validated again by the caller (towline.runtime), whatever the verdict.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from towline.api.common import Condition
from towline.api.steptype import StepTypeStatus
from towline.handlers.context import ReconcileContext
from towline.k8s.client import Conflict
from towline.k8s.steptypes import read_step_type, write_step_type_status
from towline.validation.conditions import READY, merge_conditions

log = logging.getLogger(__name__)

REASON_USABLE = "Usable"
REASON_UNUSABLE = "Unusable"


async def reconcile_step_type(operator: ReconcileContext, namespace: str, name: str) -> None:
    """`namespace` is "" for a ClusterStepType."""
    body = await read_step_type(operator.api, namespace, name)
    if body is None:
        return
    problems = operator.step_type_problems(body)
    generation = int(body["metadata"].get("generation", 0))
    now = datetime.now(UTC)
    ready = Condition(
        type=READY, status="False" if problems else "True",
        reason=REASON_UNUSABLE if problems else REASON_USABLE,
        message="; ".join(problems)[:4096] if problems else "workflows can use this type",
        last_transition_time=now, observed_generation=generation,
    )
    previous = StepTypeStatus.model_validate(body.get("status") or {})
    status = StepTypeStatus(observed_generation=generation,
                            conditions=merge_conditions(previous.conditions, [ready], replaced={READY}))
    try:
        await write_step_type_status(operator.api, body, status.to_wire())
    except Conflict:
        operator.requeue_step_type((namespace, name))
