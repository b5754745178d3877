"""Deliveries the ingress refused after their signature (or bearer) checked, kept as dead letters
(towline.k8s.deliveryletters: in the Workflow's namespace, bounded, redacted) for an admin to list and replay.

Kept: a delivery the trigger's filter is false for, one for a suspended Workflow, one the API server could not
take past the client's retries, and a body over maxBodyBytes when the trigger authenticates by a header alone
(`bearer`, `gitlab`: the sender is known before the body is read; a signature over a body never read cannot be
checked, so such a body from a signing scheme is not kept). Nothing from a sender not yet authenticated is kept,
so no one without the trigger's key can fill a namespace's store. The body is kept only as big as
MAX_PAYLOAD_BYTES (else its size); a too-large one only as its size and headers.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from towline.k8s.client import ApiError, KubeApi
from towline.k8s.deliveryletters import DeliveryLetter, keep_delivery_letter, kept_headers, payload_of
from towline.triggers.ingress import cloudevents
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.payload import parse_body, trigger_data, visible_headers
from towline.triggers.ingress.workflows import Target
from towline_connectors.wire import rfc3339

log = logging.getLogger(__name__)

HEADER_AUTHENTICATED = frozenset({"bearer", "gitlab"})
"""Schemes whose sender is authenticated by a header alone, before the body is read."""


def _now() -> str:
    return rfc3339(datetime.now(UTC), timespec="seconds")


def _secret_headers(target: Target) -> tuple[str, ...]:
    verify = target.webhook.verify
    return tuple(name for name in (getattr(verify, "signature_header", None),
                                   getattr(verify, "timestamp_header", None)) if isinstance(name, str))


def _payload_and_data(target: Target, media: str, headers: dict[str, str], raw: bytes) -> tuple[Any, Any]:
    """The body as the trigger sees it, and its data mapping (None when either cannot be had)."""
    if target.cloud_event is not None:
        event = cloudevents.parse_event(media, headers, raw)
        if isinstance(event, Refusal):
            return None, None
        context: dict[str, Any] = event.as_cel()
        data = trigger_data(target.cloud_event, context)
        return context["event"], None if isinstance(data, Refusal) else data
    body = parse_body(media, raw)
    if isinstance(body, Refusal):
        return None, None
    data = trigger_data(target.webhook, {"body": body, "headers": visible_headers(headers)})
    return body, None if isinstance(data, Refusal) else data


class DeadLetters:
    """Keeps refused deliveries through the ingress's own API connection; a failure to keep is logged, never
    changes the answer."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api

    async def keep(self, target: Target, headers: dict[str, str], media: str, raw: bytes, reason: str) -> None:
        payload, data = _payload_and_data(target, media, headers, raw)
        await self._write(DeliveryLetter(
            namespace=target.namespace, workflow=target.workflow, trigger=target.trigger.name, reason=reason,
            failed_at=_now(), size=len(raw), payload=payload_of(raw, payload), data=data,
            headers=kept_headers(headers, _secret_headers(target))))

    async def keep_too_large(self, target: Target, headers: dict[str, str], size: int | None) -> None:
        if target.webhook.verify.scheme not in HEADER_AUTHENTICATED:
            return
        await self._write(DeliveryLetter(
            namespace=target.namespace, workflow=target.workflow, trigger=target.trigger.name, reason="BodyTooLarge",
            failed_at=_now(), size=size or 0, headers=kept_headers(headers, _secret_headers(target))))

    async def _write(self, letter: DeliveryLetter) -> None:
        try:
            await keep_delivery_letter(self._api, letter)
        except ApiError as error:
            log.warning("%s/%s trigger %s: could not keep the refused delivery as a dead letter: %s",
                        letter.namespace, letter.workflow, letter.trigger, error.message)
