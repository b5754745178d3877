"""`webhook.send`: a signed outbound webhook per the Standard Webhooks spec.

Headers `webhook-id` (the step's idempotency key, stable across retries so the
receiver can dedupe), `webhook-timestamp` and `webhook-signature` (`v1,` HMAC-SHA256
for `whsec_` secrets, `v1a,` ed25519 for `whsk_` keys; several space-separated
secrets sign with each, for rotation). This module must never include the
signing secret, or anything derived from it other than the signature, in output.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from typing import Any

from pydantic import Field, StrictBool, field_validator

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass, classify_http_status
from towline_connectors.httpcall import HttpCall, send
from towline_connectors.models import CredentialRef, HttpUrlText, InputModel, OutputModel
from towline_connectors.signing import sign
from towline_connectors.spec import (
    IDEMPOTENCY_KEY_HEADER,
    ActionResult,
    ActionSpec,
    CredentialRequirement,
    RetryDefaults,
    url_input_destinations,
)
from towline_connectors.wire import rfc3339

# The spec forbids `.` in the id (it delimits the signed content); keep ids
# printable and short, and hash anything else deterministically.
_SAFE_ID = re.compile(r"^[A-Za-z0-9_:-]{1,128}$")
DEFAULT_SECRET = CredentialRef(credential="webhook", key="signing-secret")
_RUNNER_HEADERS = frozenset(
    {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "content-type",
        "idempotency-key",
        "host",
        "content-length",
    }
)


class WebhookInput(InputModel):
    """`with:` of webhook.send."""

    url: HttpUrlText = Field(description="The receiver's endpoint (https recommended).")
    payload: Any = Field(description="JSON payload; sent minified, exactly as signed.")
    type: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$",
        description="Event type; when set the body is the spec's envelope {type, timestamp, data: payload}.",
    )
    secret: CredentialRef = Field(default=DEFAULT_SECRET, description="whsec_/whsk_ signing secret(s).")
    headers: dict[str, str] = Field(default_factory=dict, description="Extra headers; not the signed ones.")
    timeout_seconds: float = Field(default=30.0, gt=0, le=300)
    trace_context: StrictBool = Field(
        default=True, description="Send the attempt's W3C `traceparent` header while the operator exports traces; "
        "false keeps the run's trace ids from this receiver.",
    )

    @field_validator("headers")
    @classmethod
    def _signed_headers_are_ours(cls, headers: dict[str, str]) -> dict[str, str]:
        for name in headers:
            if name.lower() in _RUNNER_HEADERS:
                raise ValueError(f"header {name!r} is set by webhook.send; remove it")
        return headers

    max_response_bytes: int = Field(default=64 * 1024, gt=0, le=1024 * 1024)


class WebhookOutput(OutputModel):
    status: int
    webhook_id: str
    timestamp: int


def webhook_id_for(idempotency_key: str) -> str:
    """The key itself when the spec allows it as an id, else a stable hash of it."""
    if _SAFE_ID.match(idempotency_key):
        return idempotency_key
    return "msg_" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


async def run_webhook(inputs: WebhookInput, ctx: ActionContext) -> ActionResult:
    msg_id = webhook_id_for(ctx.idempotency_key)
    timestamp = int(ctx.clock())
    if inputs.type is None:
        document: Any = inputs.payload
    else:
        document = {"type": inputs.type, "timestamp": _iso_utc(timestamp), "data": inputs.payload}
    body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    headers = {
        **inputs.headers,
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(ctx.secret(inputs.secret), msg_id, timestamp, body),
        "Idempotency-Key": ctx.idempotency_key,
    }
    if inputs.trace_context and ctx.traceparent and "traceparent" not in {name.lower() for name in headers}:
        headers["traceparent"] = ctx.traceparent
    reply = await send(
        ctx,
        HttpCall(
            method="POST",
            url=inputs.url,
            headers=headers,
            content=body,
            mutating=True,
            timeout_seconds=inputs.timeout_seconds,
            follow_redirects=False,
            max_response_bytes=inputs.max_response_bytes,
        ),
    )
    # Standard Webhooks: a redirect is a failure (update the URL) and 410 means
    # the receiver wants no more deliveries.
    if 300 <= reply.status < 400:
        raise ActionError(
            ErrorClass.PERMANENT,
            f"{reply.what} answered HTTP {reply.status} (a redirect); webhooks do not follow redirects, update the URL",
        )
    if reply.status == 410:
        raise ActionError(ErrorClass.PERMANENT, f"{reply.what} answered 410 Gone: the receiver wants no more webhooks")
    error = classify_http_status(reply.status, reply.headers, now=ctx.clock(), what=reply.what)
    if error is not None:
        raise error
    return ActionResult(output=WebhookOutput(status=reply.status, webhook_id=msg_id, timestamp=timestamp))


def _iso_utc(timestamp: int) -> str:
    return rfc3339(datetime.datetime.fromtimestamp(timestamp, datetime.UTC))


SPEC = ActionSpec(
    name="webhook.send",
    summary="Send a signed webhook (Standard Webhooks: webhook-id/-timestamp/-signature)",
    input_model=WebhookInput,
    output_model=WebhookOutput,
    run=run_webhook,
    credential=CredentialRequirement(type="standard-webhooks-secret", required_keys=(DEFAULT_SECRET.key,)),
    idempotency=IDEMPOTENCY_KEY_HEADER,
    default_retry=RetryDefaults(limit=8, base_delay_seconds=5.0, max_delay_seconds=3600.0),
    rate_limit_hint="receiver-specific; 429/502/504 and Retry-After are honoured",
    destinations_for=url_input_destinations("url"),
)
