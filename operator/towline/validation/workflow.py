"""Validate a Workflow beyond what the API server's schema and CEL rules can check.

Pure: no Kubernetes client, no clock, no network. Connector knowledge comes in
through an `ActionCatalog`. Problems are values (`ValidationError`: field and
message naming the fix), in the order a reader meets them in the manifest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from towline.api.workflow import ValidationError, WorkflowSpec
from towline.validation.actions import ActionCatalog
from towline.validation.bindings import expression_errors
from towline.validation.graph import cycle_errors, duplicate_id_errors, locate_steps, needs_errors
from towline.validation.loops import loop_errors
from towline.validation.notifications import notification_errors
from towline.validation.outputs import output_errors
from towline.validation.parsing import parse_workflow_spec
from towline.validation.schemaguard import bounded_schema_work
from towline.validation.steps import step_errors
from towline.validation.subflows import subflow_errors
from towline.validation.triggers import param_errors, trigger_errors

MAX_ERRORS = 100
"""status.validationErrors holds at most this many; the Ready message gives the total."""


def validate_workflow(spec: WorkflowSpec, catalog: ActionCatalog) -> list[ValidationError]:
    """Every problem in a parsed spec; empty when the workflow can run."""
    located = locate_steps(spec)
    errors = [
        *param_errors(spec),
        *trigger_errors(spec),
        *duplicate_id_errors(located),
        *needs_errors(located),
        *cycle_errors(located),
        *step_errors(spec, catalog),
        *expression_errors(spec),
        *loop_errors(spec),
        *subflow_errors(spec),
        *notification_errors(spec, catalog),
        *output_errors(spec),
    ]
    return sorted(_unique(errors), key=lambda e: _manifest_order(e.field))


def validate_workflow_manifest(
    raw_spec: Mapping[str, Any], catalog: ActionCatalog
) -> tuple[WorkflowSpec | None, list[ValidationError]]:
    """Parse then validate a raw `spec`: what a handler calls with the object from the API server."""
    spec, errors = parse_workflow_spec(raw_spec)
    if spec is None:
        return None, errors
    with bounded_schema_work():
        return spec, validate_workflow(spec, catalog)


def _unique(errors: list[ValidationError]) -> list[ValidationError]:
    seen: set[tuple[str, str]] = set()
    kept = []
    for error in errors:
        if (error.field, error.message) not in seen:
            seen.add((error.field, error.message))
            kept.append(error)
    return kept


_SECTION_ORDER = (
    "params", "triggers", "steps", "finally", "compensations", "policy", "approvalNotifications", "outputs",
)


def _manifest_order(field: str) -> tuple[int, list[tuple[int, str]]]:
    """Sort key: the spec's sections in manifest order, then list indexes numerically."""
    section = field.removeprefix("spec.").split(".", 1)[0].split("[", 1)[0]
    rank = _SECTION_ORDER.index(section) if section in _SECTION_ORDER else len(_SECTION_ORDER)
    parts: list[tuple[int, str]] = []
    for chunk in field.replace("]", "").replace("[", ".#").split("."):
        parts.append((int(chunk[1:]), "") if chunk.startswith("#") and chunk[1:].isdigit() else (-1, chunk))
    return rank, parts
