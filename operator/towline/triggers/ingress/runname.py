"""Exactly once: the run's name is a function of the delivery, so a redelivery finds its run.

The delivery's identity is, in order: the header or body field the trigger
names in `deliveryId`, the scheme's own id (`X-GitHub-Delivery`, `webhook-id`),
or a hash of the signed content (which includes the signed timestamp, when the
scheme signs one, or else the current tolerance window). Two deliveries with
the same identity get the same name, and the API server's 409 makes the
second create find the first run: nothing fires twice, even when they race.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from towline.api.workflow import WebhookTrigger
from towline.engine.naming import MAX_NAME_LENGTH, dns_label
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.verify import Verified

MAX_DELIVERY_ID = 256
_DIGEST_LENGTH = 16


def delivery_identity(  # noqa: PLR0911 - the sources of an id, in order of preference
    trigger: WebhookTrigger, verified: Verified, headers: Mapping[str, str], body: Any, *, now: float
) -> tuple[str, str | None] | Refusal:
    """(identity for the run name, delivery id to record in the run) or why the delivery cannot be named."""
    configured = trigger.delivery_id
    if configured is not None and configured.header is not None:
        value = headers.get(configured.header.lower())
        if not value:
            return Refusal(400, "MissingDeliveryId", f"missing {configured.header}, the trigger's deliveryId header")
        return _checked(value)
    if configured is not None and configured.field is not None:
        found = _field(body, configured.field)
        if not isinstance(found, (str, int)) or isinstance(found, bool) or found == "":
            return Refusal(400, "MissingDeliveryId",
                           f"the body has no string or integer at {configured.field}, the trigger's deliveryId field")
        return _checked(str(found))
    if verified.delivery_id:
        return _checked(verified.delivery_id)
    if verified.timestamp is not None:
        return f"signed:{verified.signed_digest}", None
    # Nothing signed says when: the same content within one tolerance window is the same delivery.
    window = int(now // trigger.verify.tolerance_seconds)
    return f"content:{verified.signed_digest}:{window}", None


def _checked(value: str) -> tuple[str, str | None] | Refusal:
    if len(value) > MAX_DELIVERY_ID:
        return Refusal(400, "MissingDeliveryId", f"the delivery id is longer than {MAX_DELIVERY_ID} characters")
    return f"id:{value}", value


def _field(body: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(body, dict) or part not in body:
            return None
        body = body[part]
    return body


def webhook_run_name(namespace: str, workflow: str, trigger: str, identity: str) -> str:
    """`<workflow>-<trigger>-<16 hex>`: readable prefix, and a hash of everything that makes it unique."""
    digest = hashlib.sha256(f"{namespace}/{workflow}/{trigger}/{identity}".encode("utf-8", "surrogateescape"))
    suffix = digest.hexdigest()[:_DIGEST_LENGTH]
    prefix = dns_label(f"{workflow}-{trigger}", limit=MAX_NAME_LENGTH - _DIGEST_LENGTH - 1)
    return f"{prefix}-{suffix}"
