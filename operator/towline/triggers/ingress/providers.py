"""Signature checks of four senders that each sign their own way: GitLab, Slack, Stripe, Shopify.
Pure: time is an argument.

Each follows the provider's published algorithm, over the raw body, with
`hmac.compare_digest`, and refuses what the headers alone condemn before
the body is read (the same `precheck` / `body_mac` / `verify` contract as
`verify`):

- `gitlab`: GitLab sends the webhook's "Secret token" verbatim in
  `X-Gitlab-Token` (docs.gitlab.com, "Webhooks", "Validate payloads by using a
  secret token"). Nothing is signed: like `bearer`, the token is all that
  proves the sender. The delivery id is GitLab's `Idempotency-Key` (the same
  across retries and "Resend request", GitLab 17.4 and later), else
  `X-Gitlab-Event-UUID`.
- `slack`: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">`
  keyed with the app's signing secret, `X-Slack-Request-Timestamp` in Unix
  seconds; Slack asks receivers to refuse requests older than five minutes
  (api.slack.com, "Verifying requests from Slack"). Slack sends no delivery id
  header; the Events API's `event_id` is in the signed body.
- `stripe`: `Stripe-Signature: t=<timestamp>,v1=<hex>[,v1=<hex>...]`, each
  `v1` the hex HMAC-SHA256 of `"<t>.<body>"` keyed with the endpoint's whole
  signing secret, `whsec_` included (docs.stripe.com, "Check the webhook
  signatures", "Verify signatures manually"). Several `v1` during a secret
  rotation: any one valid passes. Stripe's libraries tolerate five minutes.
  The event `id` is in the signed body; a retry is signed anew with the same id.
- `shopify`: `X-Shopify-Hmac-Sha256` (Shopify Events: `Shopify-Hmac-Sha256`)
  is the base64 of the HMAC-SHA256 of the body keyed with the app's client
  secret (shopify.dev, "Verify webhook deliveries"). No time and no id is
  signed; `X-Shopify-Webhook-Id` is recorded, never trusted to name a run.

Never puts a secret, a signature or the body into a message.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
from collections.abc import Mapping

from towline.api.webhooks import WebhookVerification
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.signed import (
    HEX_SHA256,
    MAX_SIGNATURES,
    BodyMac,
    SigningKeys,
    TimestampedHexMac,
    Verified,
    digest,
    mac_of,
    signed_timestamp,
    token_matches,
    unauthorized,
)

PROVIDER_SCHEMES = frozenset({"gitlab", "slack", "stripe", "shopify"})
SLACK_CHALLENGE_BYTES = 4096
"""Larger bodies are never Slack's URL verification (three short fields); they are not even parsed for it."""
_SLACK_CHALLENGE = re.compile(r"[A-Za-z0-9_\-]{1,200}")
SHOPIFY_SIGNATURE_HEADERS = ("x-shopify-hmac-sha256", "shopify-hmac-sha256")
SHOPIFY_ID_HEADERS = ("x-shopify-webhook-id", "shopify-webhook-id")


def provider_precheck(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], *, now: float
) -> Refusal | None:
    """What the headers alone condemn: a missing or malformed signature, a stale timestamp, a wrong token."""
    checked: object
    if verify.scheme == "gitlab":
        checked = _gitlab(keys, headers, b"")
    elif verify.scheme in _TIMESTAMPED:
        checked = _TIMESTAMPED[verify.scheme].signatures(verify, headers, now)
    else:
        checked = _shopify_signature(headers)
    return checked if isinstance(checked, Refusal) else None


def provider_body_mac(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], *, now: float
) -> BodyMac | None:
    """The MAC to feed with the body, once the headers passed `provider_precheck`; None for GitLab's token."""
    if keys.secret is None or verify.scheme == "gitlab":
        return None
    if verify.scheme in _TIMESTAMPED:
        return _TIMESTAMPED[verify.scheme].body_mac(verify, keys, headers, now=now)
    return BodyMac(keys.secret, b"")


def provider_verify(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], body: bytes, *, now: float,
    mac: BodyMac | None = None,
) -> Verified | Refusal:
    """Check one delivery. `headers` has lower-case names; `mac`, if given, was fed exactly `body`."""
    if verify.scheme == "gitlab":
        return _gitlab(keys, headers, body)
    if verify.scheme in _TIMESTAMPED:
        return _TIMESTAMPED[verify.scheme].verify(verify, keys, headers, body, now=now, mac=mac)
    return _shopify(keys, headers, body, mac)


def _gitlab(keys: SigningKeys, headers: Mapping[str, str], body: bytes) -> Verified | Refusal:
    given = headers.get("x-gitlab-token")
    if not given:
        return unauthorized("missing X-Gitlab-Token; set the webhook's Secret token in GitLab")
    if not token_matches(keys, given):
        return unauthorized("X-Gitlab-Token does not match the trigger's secret")
    # Signed by nothing, like a bearer token's request: whoever holds the token may name a delivery anyway.
    delivery_id = headers.get("idempotency-key") or headers.get("x-gitlab-event-uuid") or None
    return Verified(delivery_id=delivery_id, id_is_signed=False, timestamp=None, signed_digest=digest(body))


def _slack_headers(
    verify: WebhookVerification, headers: Mapping[str, str], now: float
) -> tuple[list[str], int] | Refusal:
    """([hex signature], timestamp) if present, well-formed and fresh."""
    given = headers.get("x-slack-signature")
    if given is None:
        return unauthorized("missing X-Slack-Signature (Slack sends it with X-Slack-Request-Timestamp on every "
                            "request of an app that has a signing secret)")
    stamp = signed_timestamp(headers.get("x-slack-request-timestamp"), "X-Slack-Request-Timestamp",
                             verify.tolerance_seconds, now)
    if isinstance(stamp, Refusal):
        return stamp
    version, _, hex_digest = given.strip().partition("=")
    if version != "v0" or not HEX_SHA256.fullmatch(hex_digest.lower()):
        return unauthorized("X-Slack-Signature must be v0=<64 hex digits>")
    return [hex_digest.lower()], stamp


def slack_challenge(media: str, body: bytes) -> str | None:
    """The `challenge` of a verified Slack `url_verification` request, which Slack sends when an Events API
    Request URL is saved and expects echoed (api.slack.com/events/url_verification); else None."""
    if media != "application/json" or len(body) > SLACK_CHALLENGE_BYTES:
        return None
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or document.get("type") != "url_verification":
        return None
    challenge = document.get("challenge")
    return challenge if isinstance(challenge, str) and _SLACK_CHALLENGE.fullmatch(challenge) else None


def _stripe_headers(
    verify: WebhookVerification, headers: Mapping[str, str], now: float
) -> tuple[list[str], int] | Refusal:
    """(well-formed v1 signatures, timestamp) from Stripe-Signature, if present and fresh."""
    given = headers.get("stripe-signature")
    if not given:
        return unauthorized("missing Stripe-Signature; Stripe signs every delivery to an endpoint")
    stamps, signatures = [], []
    for element in given.split(","):
        key, _, value = element.strip().partition("=")
        if key == "t":
            stamps.append(value)
        elif key == "v1":
            signatures.append(value.strip().lower())
    if len(stamps) != 1:
        return unauthorized("Stripe-Signature must carry exactly one t=<timestamp>")
    if not signatures:
        return unauthorized("Stripe-Signature carries no v1 signature (the only scheme Towline checks)")
    well_formed = [value for value in signatures[:MAX_SIGNATURES] if HEX_SHA256.fullmatch(value)]
    if not well_formed:
        return unauthorized("Stripe-Signature's v1 signatures must be 64 hex digits")
    stamp = signed_timestamp(stamps[0], "Stripe-Signature's t", verify.tolerance_seconds, now)
    if isinstance(stamp, Refusal):
        return stamp
    return well_formed, stamp


_TIMESTAMPED = {
    "slack": TimestampedHexMac(
        _slack_headers, lambda stamp: f"v0:{stamp}:".encode(),
        lambda _: "X-Slack-Signature does not match HMAC-SHA256 of 'v0:<timestamp>:<body>'; check the app's "
        "signing secret",
    ),
    "stripe": TimestampedHexMac(
        _stripe_headers, lambda stamp: f"{stamp}.".encode(),
        lambda count: f"none of the {count} v1 signature(s) in Stripe-Signature matches HMAC-SHA256 of "
        "'<t>.<body>'; check the endpoint's signing secret (whsec_...)",
    ),
}
"""The providers that sign a timestamp and the body with hex HMAC-SHA256, by scheme."""


def _first(headers: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((headers[name] for name in names if headers.get(name)), None)


def _shopify_signature(headers: Mapping[str, str]) -> bytes | Refusal:
    given = _first(headers, SHOPIFY_SIGNATURE_HEADERS)
    if given is None:
        return unauthorized("missing X-Shopify-Hmac-Sha256; Shopify signs every HTTPS webhook delivery")
    try:
        raw = base64.b64decode(given.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        return unauthorized("X-Shopify-Hmac-Sha256 must be the base64 of a 32-byte HMAC-SHA256")
    return raw


def _shopify(keys: SigningKeys, headers: Mapping[str, str], body: bytes, mac: BodyMac | None) -> Verified | Refusal:
    given = _shopify_signature(headers)
    if isinstance(given, Refusal):
        return given
    if not hmac.compare_digest(mac_of(keys.secret, b"", body, mac), given):
        return unauthorized("X-Shopify-Hmac-Sha256 does not match the body; check the app's client secret")
    # X-Shopify-Webhook-Id is not signed: recorded in the run, but the body names it (docs/ingress.md).
    return Verified(delivery_id=_first(headers, SHOPIFY_ID_HEADERS), id_is_signed=False, timestamp=None,
                    signed_digest=digest(body))
