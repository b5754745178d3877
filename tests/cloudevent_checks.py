"""What a receiver of Towline's CloudEvents does, for the tests: check the Standard Webhooks signature with the
ingress's own verifier (the code that takes every signed webhook) and parse the body with the CloudEvents SDK."""

from __future__ import annotations

import time
from collections.abc import Mapping

from cloudevents.v1.http import CloudEvent, from_http

from towline.api.webhooks import WebhookVerification
from towline.triggers.ingress.signed import Verified
from towline.triggers.ingress.verify import decode_keys, verify_delivery


def received_event(secret: str, headers: Mapping[str, str], body: bytes) -> CloudEvent:
    """The event, once its signature is checked against `secret` (whsec_); AssertionError naming the refusal."""
    lower = {name.lower(): value for name, value in headers.items()}
    verification = WebhookVerification.model_validate(
        {"scheme": "standard-webhooks", "secretRef": {"name": "sink", "key": "signing-secret"}})
    checked = verify_delivery(verification, decode_keys("standard-webhooks", secret.encode(), None), lower, body,
                              now=time.time())
    assert isinstance(checked, Verified), f"the signature does not verify: {checked}"
    assert checked.delivery_id == lower["webhook-id"]
    event = from_http(dict(headers), body)
    assert event["id"] == lower["webhook-id"], "webhook-id is the event's id"
    return event
