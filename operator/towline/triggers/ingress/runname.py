"""Exactly once: the run's name is a function of what the sender signed, so a replay finds its run.

The delivery's identity comes only from signed content, never from a header
the signature does not cover (anyone holding one delivery could otherwise
resend it under a fresh value as a new run):

- a `deliveryId.field` the trigger names (it is inside the signed body);
- else the id the scheme itself signs: Standard Webhooks' `webhook-id`
  (signed with the timestamp), Stripe's event `id` and a Slack Events API
  `event_id` (both inside the signed body; a retry is signed anew with the
  same id);
- else, for GitHub and Shopify (which sign neither an id nor a time), the
  body itself: an identical body is one delivery, however often and whenever
  it arrives;
- else, for `hmac`, Slack and Stripe, the signed timestamp and body.

A configured `deliveryId.header` is never signed: for signed schemes it must
be present, and is recorded in the run where no signed id is, but it never
names the run (so it can neither split one delivery into several runs nor
override the signed `webhook-id`). Only `bearer`, `gitlab` and `none`, which
sign nothing at all, name the run from it, or from GitLab's own
`Idempotency-Key` / `X-Gitlab-Event-UUID` (there the sender's token, or
nothing, is all that stands between anyone and a run anyway), else from the
body within the current tolerance window.

Two deliveries with the same identity get the same name, and the API
server's 409 makes the second create find the first run: nothing fires
twice, even when they race.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from towline.api.webhooks import WebhookTrigger
from towline.engine.naming import MAX_NAME_LENGTH, dns_label
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.verify import Verified

MAX_DELIVERY_ID = 256
_DIGEST_LENGTH = 16
UNSIGNED_SCHEMES = frozenset({"bearer", "gitlab", "none"})
"""Schemes whose signature covers nothing a delivery carries: any id is as good as the sender's word."""
BODY_IDENTITY_SCHEMES = frozenset({"github", "shopify"})
"""Schemes that sign the body and nothing else: no time, no id."""
SIGNED_ID_FIELDS = {"stripe": "id", "slack": "event_id"}
"""Where a scheme's sender puts its event id inside the signed body (used when present, unless a
`deliveryId.field` is configured)."""


@dataclass(frozen=True)
class DeliveryIdentity:
    """What names the run (`key`), and the delivery id recorded in it (`delivery_id`)."""

    key: str
    delivery_id: str | None
    keyed_by_id: bool
    """Whether `delivery_id` is part of `key` (then an existing run must record the same id)."""


def delivery_identity(  # noqa: PLR0911 - the sources of an identity, in order of preference
    trigger: WebhookTrigger, verified: Verified, headers: Mapping[str, str], body: Any, *, now: float
) -> DeliveryIdentity | Refusal:
    """The delivery's identity, from signed content only, or why the delivery cannot be named."""
    configured = trigger.delivery_id
    unsigned = trigger.verify.scheme in UNSIGNED_SCHEMES
    header_id: str | None = None
    if configured is not None and configured.header is not None:
        header_id = headers.get(configured.header.lower())
        if not header_id:
            return Refusal(400, "MissingDeliveryId", f"missing {configured.header}, the trigger's deliveryId header")
        if len(header_id) > MAX_DELIVERY_ID:
            return _too_long()
        if unsigned:
            return DeliveryIdentity(f"id:{header_id}", header_id, keyed_by_id=True)
    if configured is not None and configured.field is not None:
        found = _field(body, configured.field)
        if not _is_id(found):
            return Refusal(400, "MissingDeliveryId",
                           f"the body has no string or integer at {configured.field}, the trigger's deliveryId field")
        return _by_id(str(found))
    if verified.delivery_id and (verified.id_is_signed or unsigned):
        return _by_id(verified.delivery_id)
    default_field = SIGNED_ID_FIELDS.get(trigger.verify.scheme)
    if default_field is not None and _is_id(found := _field(body, default_field)):
        return _by_id(str(found))
    recorded = header_id or verified.delivery_id
    if recorded is not None and len(recorded) > MAX_DELIVERY_ID:
        return _too_long()
    if trigger.verify.scheme in BODY_IDENTITY_SCHEMES:
        # GitHub and Shopify sign no time: the same body is the same delivery forever (docs/ingress.md, Exactly once).
        return DeliveryIdentity(f"body:{verified.signed_digest}", recorded, keyed_by_id=False)
    if verified.timestamp is not None:
        return DeliveryIdentity(f"signed:{verified.signed_digest}", recorded, keyed_by_id=False)
    # Nothing signed says when: the same content within one tolerance window is the same delivery.
    window = int(now // trigger.verify.tolerance_seconds)
    return DeliveryIdentity(f"content:{verified.signed_digest}:{window}", recorded, keyed_by_id=False)


def _by_id(value: str) -> DeliveryIdentity | Refusal:
    if len(value) > MAX_DELIVERY_ID:
        return _too_long()
    return DeliveryIdentity(f"id:{value}", value, keyed_by_id=True)


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool) and value != ""


def _too_long() -> Refusal:
    return Refusal(400, "MissingDeliveryId", f"the delivery id is longer than {MAX_DELIVERY_ID} characters")


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
