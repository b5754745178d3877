"""Workflow validation the API server cannot do: graph, CEL, connectors, schedules, credentials.

Pure and synchronous: never imports a Kubernetes client, never reads a clock
(time is an argument), never reads a Secret. The operator writes the result to
the Workflow's status (`Ready` with `observedGeneration`, validation errors).

The connector catalog (`towline.validation.catalog`) is not re-exported here: it
loads every connector and httpx, which the engine (importing this package for its
rules) must not pull in. Whoever builds a catalog imports that module.
"""

from towline.validation.actions import ActionCatalog
from towline.validation.conditions import ready_condition, summary, workflow_conditions
from towline.validation.parsing import parse_workflow_spec
from towline.validation.workflow import MAX_ERRORS, validate_workflow, validate_workflow_manifest

__all__ = [
    "MAX_ERRORS",
    "ActionCatalog",
    "parse_workflow_spec",
    "ready_condition",
    "summary",
    "validate_workflow",
    "validate_workflow_manifest",
    "workflow_conditions",
]
