"""Which webhook trigger a path names, and whether its Workflow may start a run now.

Reads the cached Workflow (never the API server), parses and checks it once
per resourceVersion and trigger. The caller is not yet authenticated here, so
every path that is not a usable webhook trigger (no such Workflow or trigger,
a schedule trigger, a trigger the ingress cannot verify with) gets the same 404;
what was wrong goes to the ingress log (`Refusal.detail`). A Workflow whose
trigger is sound but which the operator found invalid (its status's
validationErrors) is a target: its deliveries are verified like any other, and a
signed one is refused and kept as a dead letter (`Target.invalid`), so nothing a
sender sent while the author fixes the Workflow is lost. Whether a Workflow is
suspended or invalid is told only to a signed delivery.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

from pydantic import ValidationError as PydanticError

from towline.api.webhooks import CloudEventTrigger, WebhookTrigger
from towline.api.workflow import Trigger, WorkflowSpec
from towline.jsontypes import JSON
from towline.triggers.ingress.outcome import Refusal, not_found
from towline.validation.triggers import cloud_event_errors, webhook_errors, webhook_mapping_errors

_PARSED_CACHE = 4096
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """A webhook or cloudEvent trigger of a Workflow that may start a run."""

    namespace: str
    workflow: str
    uid: str
    trigger: Trigger
    webhook: WebhookTrigger
    """The delivery settings (for a cloudEvent trigger, its verification and limits as a webhook's)."""
    suspended: bool = False
    cloud_event: CloudEventTrigger | None = None
    invalid: str | None = None
    """Why the operator found the Workflow invalid (its first problem), or None: a signed delivery is then refused
    and kept as a dead letter instead of starting a run the operator would fail."""


class TriggerResolver:
    """Finds the target of `/hooks/{namespace}/{workflow}/{trigger}` in cached Workflows."""

    def __init__(self) -> None:
        self._parsed: OrderedDict[tuple[str, str, str], WorkflowSpec | Refusal] = OrderedDict()
        self._resolved: OrderedDict[tuple[str, str, str, str], Target | Refusal] = OrderedDict()

    def resolve(self, workflow: JSON | None, namespace: str, name: str, trigger_name: str) -> Target | Refusal:
        if workflow is None:
            return not_found(f"no Workflow {name} in namespace {namespace}")
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
        if trigger is None or (trigger.webhook is None and trigger.cloud_event is None):
            names = ", ".join(t.name for t in spec.triggers if t.webhook or t.cloud_event) or "none"
            return not_found(f"Workflow {namespace}/{name} has no webhook or cloudEvent trigger {trigger_name!r} "
                             f"(such triggers: {names})")
        if trigger.cloud_event is not None:
            webhook = trigger.cloud_event.as_webhook()
            problems = cloud_event_errors(trigger.cloud_event, "cloudEvent")
        else:
            assert trigger.webhook is not None
            webhook = trigger.webhook
            problems = webhook_errors(webhook.verify, "verify") + webhook_mapping_errors(webhook, "webhook")
        if problems:
            first_problem = problems[0]
            return not_found(f"Workflow {namespace}/{name} is not valid: trigger {trigger_name}: "
                             f"{first_problem.field}: {first_problem.message}")
        status = workflow.get("status") or {}
        errors = status.get("validationErrors") or []
        invalid = None
        if errors and status.get("observedGeneration") == workflow["metadata"].get("generation"):
            first = errors[0]
            invalid = (f"Workflow {namespace}/{name} is not valid ({len(errors)} problem(s)); first: "
                       f"{first.get('field')}: {first.get('message')}")
            log.info("%s: signed deliveries to trigger %s are kept as dead letters until it is fixed", invalid,
                     trigger_name)
        return Target(namespace, name, workflow["metadata"].get("uid", ""), trigger, webhook,
                      suspended=spec.suspend, cloud_event=trigger.cloud_event, invalid=invalid)

    def _spec(self, workflow: JSON, namespace: str, name: str) -> WorkflowSpec | Refusal:
        key = (namespace, name, str(workflow["metadata"].get("resourceVersion")))
        cached = self._parsed.get(key)
        if cached is None:
            try:
                cached = WorkflowSpec.model_validate(workflow.get("spec") or {})
            except PydanticError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                cached = not_found(f"Workflow {namespace}/{name}'s spec does not parse: spec.{where}: "
                                   f"{first['msg']}")
            self._parsed[key] = cached
            while len(self._parsed) > _PARSED_CACHE:
                self._parsed.popitem(last=False)
        return cached
