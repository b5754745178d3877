"""Which webhook trigger a path names, and whether its Workflow may start a run now.

Reads the cached Workflow (never the API server), parses and checks it once
per resourceVersion and trigger, and answers the refusals a sender's operator can act on:
unknown workflow or trigger (404), invalid Workflow (422), suspended (409).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError as PydanticError

from towline.api.workflow import Trigger, WebhookTrigger, WorkflowSpec
from towline.triggers.ingress.outcome import Refusal
from towline.validation.triggers import webhook_errors, webhook_mapping_errors

JSON = dict[str, Any]
_PARSED_CACHE = 4096


@dataclass(frozen=True)
class Target:
    """A webhook trigger of a Workflow that may start a run."""

    namespace: str
    workflow: str
    uid: str
    trigger: Trigger
    webhook: WebhookTrigger


class TriggerResolver:
    """Finds the target of `/hooks/{namespace}/{workflow}/{trigger}` in cached Workflows."""

    def __init__(self) -> None:
        self._parsed: OrderedDict[tuple[str, str, str], WorkflowSpec | Refusal] = OrderedDict()
        self._resolved: OrderedDict[tuple[str, str, str, str], Target | Refusal] = OrderedDict()

    def resolve(self, workflow: JSON | None, namespace: str, name: str, trigger_name: str) -> Target | Refusal:
        if workflow is None:
            return Refusal(404, "UnknownWorkflow", f"no Workflow {name} in namespace {namespace}")
        # Any change to the Workflow (spec, status, suspend) changes its resourceVersion.
        key = (namespace, name, str(workflow["metadata"].get("resourceVersion")), trigger_name)
        resolved = self._resolved.get(key)
        if resolved is None:
            resolved = self._resolve(workflow, namespace, name, trigger_name)
            self._resolved[key] = resolved
            while len(self._resolved) > _PARSED_CACHE:
                self._resolved.popitem(last=False)
        return resolved

    def _resolve(
        self, workflow: JSON, namespace: str, name: str, trigger_name: str
    ) -> Target | Refusal:
        spec = self._spec(workflow, namespace, name)
        if isinstance(spec, Refusal):
            return spec
        trigger = next((t for t in spec.triggers if t.name == trigger_name), None)
        if trigger is None or trigger.webhook is None:
            names = ", ".join(t.name for t in spec.triggers if t.webhook is not None) or "none"
            return Refusal(404, "UnknownTrigger",
                           f"Workflow {namespace}/{name} has no webhook trigger {trigger_name!r} (webhook triggers: "
                           f"{names})")
        problems = webhook_errors(trigger.webhook.verify, "verify")
        problems += webhook_mapping_errors(trigger.webhook, "webhook")
        if problems:
            first_problem = problems[0]
            return Refusal(422, "InvalidWorkflow",
                           f"trigger {trigger_name}: {first_problem.field}: {first_problem.message}")
        status = workflow.get("status") or {}
        errors = status.get("validationErrors") or []
        if errors and status.get("observedGeneration") == workflow["metadata"].get("generation"):
            first = errors[0]
            return Refusal(422, "InvalidWorkflow", f"the Workflow is not valid ({len(errors)} problem(s)); first: "
                           f"{first.get('field')}: {first.get('message')}")
        if spec.suspend:
            return Refusal(409, "Suspended", f"Workflow {namespace}/{name} is suspended (spec.suspend: true); "
                           "no run starts until it is resumed")
        return Target(namespace, name, workflow["metadata"].get("uid", ""), trigger, trigger.webhook)

    def _spec(self, workflow: JSON, namespace: str, name: str) -> WorkflowSpec | Refusal:
        key = (namespace, name, str(workflow["metadata"].get("resourceVersion")))
        cached = self._parsed.get(key)
        if cached is None:
            try:
                cached = WorkflowSpec.model_validate(workflow.get("spec") or {})
            except PydanticError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                cached = Refusal(422, "InvalidWorkflow", f"the Workflow's spec does not parse: spec.{where}: "
                                 f"{first['msg']}")
            self._parsed[key] = cached
            while len(self._parsed) > _PARSED_CACHE:
                self._parsed.popitem(last=False)
        return cached
