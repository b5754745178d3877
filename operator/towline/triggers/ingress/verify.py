"""Signature verification over the raw body, in constant time. Pure: time is an argument.

Schemes: GitHub (`X-Hub-Signature-256`; the SHA-1 `X-Hub-Signature` is refused),
Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature` with
HMAC `v1` and ed25519 `v1a`, several signatures during rotation, `whsec_`
secrets), generic HMAC-SHA256 over `<timestamp>.<body>` with a timestamp header,
a static bearer token, and `none` for a trigger that opted in to unsigned
deliveries. GitLab, Slack, Stripe and Shopify are checked in `providers`, on
the same primitives (`signed`). A timestamp outside the tolerance, in the past
or the future, is refused. Never puts a secret, a signature or the body into a
message.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from towline.api.webhooks import WebhookVerification
from towline.k8s.secrets import MIN_SECRET_BYTES
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.providers import PROVIDER_SCHEMES, provider_body_mac, provider_precheck, provider_verify
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
    utf8,
)

__all__ = ["BodyMac", "SigningKeys", "Verified", "body_mac", "decode_keys", "precheck", "verify_delivery"]


def decode_keys(scheme: str, secret: bytes | None, public_key: bytes | None) -> SigningKeys:
    """Key material as a Secret holds it -> keys; raises ValueError saying what the value should look like."""
    decoded_secret = None
    if secret is not None:
        text = secret.strip()
        if scheme == "standard-webhooks":
            decoded_secret = _base64(text.removeprefix(b"whsec_"), "a whsec_ secret (base64 after the prefix)")
        else:
            decoded_secret = text
        if len(decoded_secret) < MIN_SECRET_BYTES:
            raise ValueError(f"the signing secret is {len(decoded_secret)} bytes; use at least {MIN_SECRET_BYTES} "
                             "(32 random bytes are usual)")
    decoded_public = None
    if public_key is not None:
        raw = _base64(public_key.strip().removeprefix(b"whpk_"), "a whpk_ ed25519 public key (base64, 32 bytes)")
        if len(raw) != 32:
            raise ValueError("the ed25519 public key must be 32 bytes (whpk_ followed by base64)")
        decoded_public = Ed25519PublicKey.from_public_bytes(raw)
    return SigningKeys(secret=decoded_secret, public_key=decoded_public)


def _base64(text: bytes, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"the key is not {what}") from None


def precheck(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], *, now: float
) -> Refusal | None:
    """Everything that can be refused before the body is read: missing or malformed signature headers,
    stale or future timestamps, a wrong bearer token. A sender refused here holds no body buffer."""
    if verify.scheme in PROVIDER_SCHEMES:
        return provider_precheck(verify, keys, headers, now=now)
    if verify.scheme == "github":
        given = _github_signature(headers)
        return given if isinstance(given, Refusal) else None
    if verify.scheme == "standard-webhooks":
        signed = _standard_headers(verify, headers, now)
        return signed if isinstance(signed, Refusal) else None
    if verify.scheme == "hmac":
        signed_hmac = _hmac_headers(verify, headers, now)
        return signed_hmac if isinstance(signed_hmac, Refusal) else None
    if verify.scheme == "bearer":
        refused = _bearer(keys, headers, b"")
        return refused if isinstance(refused, Refusal) else None
    return None if verify.allow_unsigned else unauthorized(
        "the trigger is unsigned (scheme none) but does not set allowUnsigned: true")


def body_mac(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], *, now: float
) -> BodyMac | None:
    """A MAC to feed with the body, for HMAC schemes whose headers passed `precheck`; else None."""
    if verify.scheme in PROVIDER_SCHEMES:
        return provider_body_mac(verify, keys, headers, now=now)
    if keys.secret is None:
        return None
    if verify.scheme == "github":
        return BodyMac(keys.secret, b"")
    if verify.scheme == "standard-webhooks":
        signed = _standard_headers(verify, headers, now)
        return None if isinstance(signed, Refusal) else BodyMac(keys.secret, utf8(f"{signed[0]}.{signed[2]}."))
    if verify.scheme == "hmac":
        return _hmac(verify).body_mac(verify, keys, headers, now=now)
    return None


def verify_delivery(  # noqa: PLR0911 - one answer per scheme
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], body: bytes, *, now: float,
    mac: BodyMac | None = None,
) -> Verified | Refusal:
    """Check one delivery. `headers` has lower-case names; `mac`, if given, was fed exactly `body`."""
    if verify.scheme in PROVIDER_SCHEMES:
        return provider_verify(verify, keys, headers, body, now=now, mac=mac)
    if verify.scheme == "github":
        return _github(keys, headers, body, mac)
    if verify.scheme == "standard-webhooks":
        return _standard_webhooks(verify, keys, headers, body, now, mac=mac)
    if verify.scheme == "hmac":
        return _hmac(verify).verify(verify, keys, headers, body, now=now, mac=mac)
    if verify.scheme == "bearer":
        return _bearer(keys, headers, body)
    if verify.allow_unsigned:
        return Verified(delivery_id=None, id_is_signed=False, timestamp=None, signed_digest=digest(body))
    return unauthorized("the trigger is unsigned (scheme none) but does not set allowUnsigned: true")


def _github_signature(headers: Mapping[str, str]) -> str | Refusal:
    given = headers.get("x-hub-signature-256")
    if given is None:
        if "x-hub-signature" in headers:
            return unauthorized("SHA-1 signatures (X-Hub-Signature) are refused; Towline checks X-Hub-Signature-256, "
                                "which GitHub sends alongside it")
        return unauthorized("missing X-Hub-Signature-256; set a secret on the GitHub webhook")
    algorithm, _, hex_digest = given.strip().partition("=")
    if algorithm != "sha256" or not HEX_SHA256.fullmatch(hex_digest.lower()):
        return unauthorized("X-Hub-Signature-256 must be sha256=<64 hex digits>")
    return hex_digest.lower()


def _github(keys: SigningKeys, headers: Mapping[str, str], body: bytes, mac: BodyMac | None) -> Verified | Refusal:
    hex_digest = _github_signature(headers)
    if isinstance(hex_digest, Refusal):
        return hex_digest
    expected = mac_of(keys.secret, b"", body, mac).hex()
    if not hmac.compare_digest(expected.encode(), utf8(hex_digest)):
        return unauthorized("X-Hub-Signature-256 does not match the body; check the webhook's secret")
    # X-GitHub-Delivery is not signed: anyone holding one delivery can resend it with a fresh value.
    return Verified(delivery_id=headers.get("x-github-delivery"), id_is_signed=False, timestamp=None,
                    signed_digest=digest(body))


def _standard_headers(
    verify: WebhookVerification, headers: Mapping[str, str], now: float
) -> tuple[str, str, int] | Refusal:
    """(webhook-id, webhook-signature, timestamp) if present and fresh."""
    delivery_id = headers.get("webhook-id")
    signatures = headers.get("webhook-signature")
    for name, value in (("webhook-id", delivery_id), ("webhook-signature", signatures)):
        if not value:
            return unauthorized(f"missing {name} (Standard Webhooks sends webhook-id, webhook-timestamp and "
                                "webhook-signature)")
    assert delivery_id is not None and signatures is not None
    stamp = signed_timestamp(headers.get("webhook-timestamp"), "webhook-timestamp", verify.tolerance_seconds, now)
    if isinstance(stamp, Refusal):
        return stamp
    return delivery_id, signatures, stamp


def _standard_webhooks(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], body: bytes, now: float,
    *, mac: BodyMac | None,
) -> Verified | Refusal:
    signed = _standard_headers(verify, headers, now)
    if isinstance(signed, Refusal):
        return signed
    delivery_id, signatures, stamp = signed
    prefix = utf8(f"{delivery_id}.{stamp}.")
    content = prefix + body
    expected_v1 = base64.b64encode(mac_of(keys.secret, prefix, body, mac)) if keys.secret is not None else None
    entries = signatures.split()
    for entry in entries[:MAX_SIGNATURES]:
        version, _, value = entry.partition(",")
        if version == "v1" and expected_v1 is not None and hmac.compare_digest(expected_v1, utf8(value)):
            break
        if version == "v1a" and keys.public_key is not None and _ed25519_matches(keys.public_key, value, content):
            break
    else:
        return unauthorized(f"none of the {min(len(entries), MAX_SIGNATURES)} signature(s) in webhook-signature "
                            "matches; check the signing secret")
    return Verified(delivery_id=delivery_id, id_is_signed=True, timestamp=stamp, signed_digest=digest(content))


def _ed25519_matches(public_key: Ed25519PublicKey, value: str, content: bytes) -> bool:
    try:
        signature = base64.b64decode(value, validate=True)
        public_key.verify(signature, content)
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True


def _hmac_headers(
    verify: WebhookVerification, headers: Mapping[str, str], now: float
) -> tuple[list[str], int] | Refusal:
    """([hex signature], timestamp) if well-formed and fresh."""
    header = verify.signature_header
    given = headers.get(header.lower())
    if given is None:
        return unauthorized(f"missing {header}")
    stamp = signed_timestamp(headers.get(verify.timestamp_header.lower()), verify.timestamp_header,
                       verify.tolerance_seconds, now)
    if isinstance(stamp, Refusal):
        return stamp
    hex_digest = given.strip().lower().removeprefix("sha256=")
    if not HEX_SHA256.fullmatch(hex_digest):
        return unauthorized(f"{header} must be 64 hex digits (HMAC-SHA256), optionally prefixed sha256=")
    return [hex_digest], stamp


def _hmac(verify: WebhookVerification) -> TimestampedHexMac:
    """The `hmac` scheme: `<timestamp>.<body>`, in the headers the trigger names."""
    header = verify.signature_header
    return TimestampedHexMac(
        _hmac_headers, lambda stamp: f"{stamp}.".encode(),
        lambda _: f"{header} does not match HMAC-SHA256 of '<timestamp>.<body>'; check the secret",
    )


def _bearer(keys: SigningKeys, headers: Mapping[str, str], body: bytes) -> Verified | Refusal:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return unauthorized("missing Authorization: Bearer <token>")
    if not token_matches(keys, token):
        return unauthorized("the bearer token does not match")
    return Verified(delivery_id=None, id_is_signed=False, timestamp=None, signed_digest=digest(body))
