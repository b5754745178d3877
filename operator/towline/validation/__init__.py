"""Workflow validation the API server cannot do: graph, CEL, connectors, schedules, credentials.

Pure and synchronous: never imports a Kubernetes client, never reads a clock
(time is an argument), never reads a Secret. The operator writes the result to
the Workflow's status (`Ready` with `observedGeneration`, validation errors).
"""

from towline.validation.actions import ActionCatalog
from towline.validation.catalog import ConnectorCatalog, connector_catalog
from towline.validation.conditions import ready_condition, summary, workflow_conditions
from towline.validation.parsing import parse_workflow_spec
from towline.validation.workflow import MAX_ERRORS, validate_workflow, validate_workflow_manifest

__all__ = [
    "MAX_ERRORS",
    "ActionCatalog",
    "ConnectorCatalog",
    "connector_catalog",
    "parse_workflow_spec",
    "ready_condition",
    "summary",
    "validate_workflow",
    "validate_workflow_manifest",
    "workflow_conditions",
]
