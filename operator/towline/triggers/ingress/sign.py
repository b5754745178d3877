"""Signing a delivery the way each sender does: `towline webhook send`, tests and benchmarks use it.

The mirror image of `verify`: the same signed content, produced from the
sender's side, so a test that signs here and verifies there exercises both.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline.triggers.ingress.cloudevents import signed_attributes


def github_headers(secret: bytes, body: bytes, delivery_id: str | None = None) -> dict[str, str]:
    headers = {"X-Hub-Signature-256": "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()}
    if delivery_id is not None:
        headers["X-GitHub-Delivery"] = delivery_id
    return headers


def standard_webhooks_headers(secret: str, delivery_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """`secret` as the sender holds it: `whsec_` and base64."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    content = f"{delivery_id}.{timestamp}.".encode() + body
    signature = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return {"webhook-id": delivery_id, "webhook-timestamp": str(timestamp), "webhook-signature": f"v1,{signature}"}


def standard_webhooks_ed25519_headers(
    private_key: Ed25519PrivateKey, delivery_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    content = f"{delivery_id}.{timestamp}.".encode() + body
    signature = base64.b64encode(private_key.sign(content)).decode()
    return {"webhook-id": delivery_id, "webhook-timestamp": str(timestamp), "webhook-signature": f"v1a,{signature}"}


def hmac_headers(
    secret: bytes, timestamp: int, body: bytes, *, signature_header: str = "X-Signature",
    timestamp_header: str = "X-Timestamp",
) -> dict[str, str]:
    content = f"{timestamp}.".encode() + body
    return {
        signature_header: "sha256=" + hmac.new(secret, content, hashlib.sha256).hexdigest(),
        timestamp_header: str(timestamp),
    }


def bearer_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def gitlab_headers(token: str, delivery_id: str | None = None) -> dict[str, str]:
    """GitLab sends the webhook's secret token as it is, and (17.4 and later) an Idempotency-Key."""
    headers = {"X-Gitlab-Token": token}
    if delivery_id is not None:
        headers |= {"Idempotency-Key": delivery_id, "X-Gitlab-Event-UUID": delivery_id}
    return headers


def slack_headers(secret: bytes, timestamp: int, body: bytes) -> dict[str, str]:
    content = f"v0:{timestamp}:".encode() + body
    return {"X-Slack-Signature": "v0=" + hmac.new(secret, content, hashlib.sha256).hexdigest(),
            "X-Slack-Request-Timestamp": str(timestamp)}


def stripe_headers(secrets: list[bytes], timestamp: int, body: bytes) -> dict[str, str]:
    """`secrets` as the endpoint holds them (`whsec_...`, used whole); more than one while a secret rotates."""
    content = f"{timestamp}.".encode() + body
    signatures = "".join(f",v1={hmac.new(secret, content, hashlib.sha256).hexdigest()}" for secret in secrets)
    return {"Stripe-Signature": f"t={timestamp}{signatures}"}


def shopify_headers(secret: bytes, body: bytes, webhook_id: str | None = None) -> dict[str, str]:
    headers = {"X-Shopify-Hmac-Sha256": base64.b64encode(hmac.new(secret, body, hashlib.sha256).digest()).decode()}
    if webhook_id is not None:
        headers["X-Shopify-Webhook-Id"] = webhook_id
    return headers


def cloud_event_standard_headers(
    secret: str, delivery_id: str, timestamp: int, headers: Mapping[str, str], body: bytes
) -> dict[str, str]:
    """Standard Webhooks over a CloudEvent as sent (`headers` from the SDK's to_binary or to_structured): in
    binary mode the ce- headers and Content-Type are signed before the body (cloudevents.signed_attributes)."""
    signed = signed_attributes({name.lower(): value for name, value in headers.items()}) + body
    return standard_webhooks_headers(secret, delivery_id, timestamp, signed)
