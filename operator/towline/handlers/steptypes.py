"""Reconcile one StepType or ClusterStepType, and find the types a Workflow names.

`reconcile_step_type` reports in status whether workflows can use a type.

`Ready` is True when the spec parses, its schemas are valid JSON Schema and the
chart's image policy allows its image; otherwise False with every reason, each
naming the field. Writes only `status`. The Workflows that may name the type
are validated again by the caller (towline.runtime), whatever the verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from towline.api.common import Condition
from towline.api.steptype import ResolvedStepType, StepTypeStatus
from towline.api.steptypenames import step_type_reference
from towline.handlers.context import Definitions, StepTypeDeps
from towline.k8s.client import Conflict, KubeApi
from towline.k8s.steptypes import read_step_type, write_step_type_status
from towline.validation.conditions import READY, merge_conditions
from towline.validation.steptypes import StepTypeCatalog, availability, catalog_from

log = logging.getLogger(__name__)

REASON_USABLE = "Usable"
REASON_UNUSABLE = "Unusable"


async def reconcile_step_type(deps: StepTypeDeps, namespace: str, name: str) -> None:
    """`namespace` is "" for a ClusterStepType."""
    body = await read_step_type(deps.api, namespace, name)
    if body is None:
        return
    checked = deps.check_step_type(body)
    problems = [] if isinstance(checked, ResolvedStepType) else checked
    generation = int(body["metadata"].get("generation", 0))
    now = deps.now()
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
        await write_step_type_status(deps.api, body, status.to_wire())
    except Conflict:
        deps.requeue((namespace, name))


async def step_types_of(
    api: KubeApi, definitions: Definitions, namespace: str, raw_spec: dict[str, Any]
) -> dict[str, ResolvedStepType | str]:
    """The types the steps name, from the watch cache; one the cache lacks is read live before the run is refused.

    Right after the operator starts, a run's first pass may come before the StepType watch's first list:
    a cache miss alone must never fail a run.
    """
    available = dict(definitions.step_types_for(namespace))
    for action in named_actions(raw_spec):
        reference = step_type_reference(action)
        if reference is None or action in available:
            continue
        kind, name = reference
        body = await read_step_type(api, namespace if kind == "StepType" else "", name)
        if body is not None:
            available[action] = availability(definitions.check_step_type({**body, "kind": kind}))
    return available


def named_actions(raw_spec: dict[str, Any]) -> set[str]:
    """Every `action` string of the Workflow's steps, finally and compensations, as written (not yet validated)."""
    steps = [step for part in ("steps", "finally", "compensations") for step in raw_spec.get(part) or []
             if isinstance(step, dict)]
    return {step["action"] for step in steps if isinstance(step.get("action"), str)}


def catalog_of(
    definitions: Definitions, namespace: str, step_types: Mapping[str, ResolvedStepType | str]
) -> StepTypeCatalog:
    """The built-ins and these types (usable or not, with why) as one catalog for validating `namespace`'s
    workflows; code steps are unavailable where the chart has not turned them on."""
    return catalog_from(definitions.catalog, step_types, definitions.code_steps.why_off(namespace))
