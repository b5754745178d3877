"""Signature verification over the raw body, in constant time. Pure: time is an argument.

Schemes: GitHub (`X-Hub-Signature-256`; the SHA-1 `X-Hub-Signature` is refused),
Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature` with
HMAC `v1` and ed25519 `v1a`, several signatures during rotation, `whsec_`
secrets), generic HMAC-SHA256 over `<timestamp>.<body>` with a timestamp header,
a static bearer token, and `none` for a trigger that opted in to unsigned
deliveries. A timestamp outside the tolerance, in the past or the future, is
refused. Never puts a secret, a signature or the body into a message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from towline.api.workflow import WebhookVerification
from towline.k8s.secrets import MIN_SECRET_BYTES
from towline.triggers.ingress.outcome import Refusal

MAX_SIGNATURES = 8
"""Signatures checked per delivery: enough for a rotation, not enough to make ed25519 a cost lever."""

_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class SigningKeys:
    """The decoded key material of one trigger (from its Secret); never logged."""

    secret: bytes | None = None
    public_key: Ed25519PublicKey | None = None


@dataclass(frozen=True)
class Verified:
    """A delivery whose signature checked out (or a trigger that allows unsigned ones)."""

    delivery_id: str | None
    """The scheme's own delivery id (X-GitHub-Delivery, webhook-id), if the sender sent one."""
    id_is_signed: bool
    """Whether the signature covers `delivery_id` (webhook-id is signed; X-GitHub-Delivery is not)."""
    timestamp: int | None
    """The signed timestamp, for schemes that sign one."""
    signed_digest: str
    """SHA-256 of everything the signature covers: the fallback identity of a delivery."""


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


class BodyMac:
    """HMAC-SHA256 of a delivery's signed content, fed chunk by chunk while the body arrives.

    Made by `body_mac` once the headers passed `precheck`, so the signed prefix
    (Standard Webhooks' `<id>.<timestamp>.`, hmac's `<timestamp>.`) is known.
    """

    def __init__(self, secret: bytes, prefix: bytes) -> None:
        self._mac = hmac.new(secret, prefix, hashlib.sha256)

    def update(self, chunk: bytes) -> None:
        self._mac.update(chunk)

    def digest(self) -> bytes:
        return self._mac.copy().digest()


def precheck(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], *, now: float
) -> Refusal | None:
    """Everything that can be refused before the body is read: missing or malformed signature headers,
    stale or future timestamps, a wrong bearer token. A sender refused here holds no body buffer."""
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
    return None if verify.allow_unsigned else _unauthorized(
        "the trigger is unsigned (scheme none) but does not set allowUnsigned: true")


def body_mac(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], *, now: float
) -> BodyMac | None:
    """A MAC to feed with the body, for HMAC schemes whose headers passed `precheck`; else None."""
    if keys.secret is None:
        return None
    if verify.scheme == "github":
        return BodyMac(keys.secret, b"")
    if verify.scheme == "standard-webhooks":
        signed = _standard_headers(verify, headers, now)
        return None if isinstance(signed, Refusal) else BodyMac(keys.secret, _utf8(f"{signed[0]}.{signed[2]}."))
    if verify.scheme == "hmac":
        signed_hmac = _hmac_headers(verify, headers, now)
        return None if isinstance(signed_hmac, Refusal) else BodyMac(keys.secret, f"{signed_hmac[1]}.".encode())
    return None


def verify_delivery(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], body: bytes, *, now: float,
    mac: BodyMac | None = None,
) -> Verified | Refusal:
    """Check one delivery. `headers` has lower-case names; `mac`, if given, was fed exactly `body`."""
    if verify.scheme == "github":
        return _github(keys, headers, body, mac)
    if verify.scheme == "standard-webhooks":
        return _standard_webhooks(verify, keys, headers, body, now, mac=mac)
    if verify.scheme == "hmac":
        return _hmac_with_timestamp(verify, keys, headers, body, now, mac=mac)
    if verify.scheme == "bearer":
        return _bearer(keys, headers, body)
    if verify.allow_unsigned:
        return Verified(delivery_id=None, id_is_signed=False, timestamp=None, signed_digest=_digest(body))
    return _unauthorized("the trigger is unsigned (scheme none) but does not set allowUnsigned: true")


def _unauthorized(message: str) -> Refusal:
    return Refusal(401, "Unauthorized", message)


def _digest(*parts: bytes) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.hexdigest()


def _utf8(text: str) -> bytes:
    # Header values arrive decoded with surrogateescape; this restores the bytes as sent.
    return text.encode("utf-8", "surrogateescape")


def _hmac_sha256(secret: bytes | None, content: bytes) -> bytes:
    assert secret is not None, "decode_keys guarantees a secret for HMAC schemes"
    return hmac.new(secret, content, hashlib.sha256).digest()


def _mac_of(secret: bytes | None, prefix: bytes, body: bytes, mac: BodyMac | None) -> bytes:
    return mac.digest() if mac is not None else _hmac_sha256(secret, prefix + body)


def _github_signature(headers: Mapping[str, str]) -> str | Refusal:
    given = headers.get("x-hub-signature-256")
    if given is None:
        if "x-hub-signature" in headers:
            return _unauthorized("SHA-1 signatures (X-Hub-Signature) are refused; Towline checks X-Hub-Signature-256, "
                                 "which GitHub sends alongside it")
        return _unauthorized("missing X-Hub-Signature-256; set a secret on the GitHub webhook")
    algorithm, _, hex_digest = given.strip().partition("=")
    if algorithm != "sha256" or not _HEX_SHA256.fullmatch(hex_digest.lower()):
        return _unauthorized("X-Hub-Signature-256 must be sha256=<64 hex digits>")
    return hex_digest.lower()


def _github(keys: SigningKeys, headers: Mapping[str, str], body: bytes, mac: BodyMac | None) -> Verified | Refusal:
    hex_digest = _github_signature(headers)
    if isinstance(hex_digest, Refusal):
        return hex_digest
    expected = _mac_of(keys.secret, b"", body, mac).hex()
    if not hmac.compare_digest(expected.encode(), _utf8(hex_digest)):
        return _unauthorized("X-Hub-Signature-256 does not match the body; check the webhook's secret")
    # X-GitHub-Delivery is not signed: anyone holding one delivery can resend it with a fresh value.
    return Verified(delivery_id=headers.get("x-github-delivery"), id_is_signed=False, timestamp=None,
                    signed_digest=_digest(body))


def _timestamp(text: str | None, header: str, tolerance: int, now: float) -> int | Refusal:
    if text is None:
        return _unauthorized(f"missing {header}")
    if not re.fullmatch(r"[0-9]{1,12}", text.strip()):
        return _unauthorized(f"{header} must be a Unix timestamp in seconds")
    stamp = int(text.strip())
    skew = stamp - now
    if skew > tolerance:
        return _unauthorized(f"{header} is {skew:.0f} s in the future, beyond the {tolerance} s tolerance; "
                             "check the sender's clock")
    if -skew > tolerance:
        return _unauthorized(f"{header} is {-skew:.0f} s old, beyond the {tolerance} s tolerance; "
                             "a replayed or long-delayed delivery is refused")
    return stamp


def _standard_headers(
    verify: WebhookVerification, headers: Mapping[str, str], now: float
) -> tuple[str, str, int] | Refusal:
    """(webhook-id, webhook-signature, timestamp) if present and fresh."""
    delivery_id = headers.get("webhook-id")
    signatures = headers.get("webhook-signature")
    for name, value in (("webhook-id", delivery_id), ("webhook-signature", signatures)):
        if not value:
            return _unauthorized(f"missing {name} (Standard Webhooks sends webhook-id, webhook-timestamp and "
                                 "webhook-signature)")
    assert delivery_id is not None and signatures is not None
    stamp = _timestamp(headers.get("webhook-timestamp"), "webhook-timestamp", verify.tolerance_seconds, now)
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
    prefix = _utf8(f"{delivery_id}.{stamp}.")
    content = prefix + body
    expected_v1 = base64.b64encode(_mac_of(keys.secret, prefix, body, mac)) if keys.secret is not None else None
    entries = signatures.split()
    for entry in entries[:MAX_SIGNATURES]:
        version, _, value = entry.partition(",")
        if version == "v1" and expected_v1 is not None and hmac.compare_digest(expected_v1, _utf8(value)):
            break
        if version == "v1a" and keys.public_key is not None and _ed25519_matches(keys.public_key, value, content):
            break
    else:
        return _unauthorized(f"none of the {min(len(entries), MAX_SIGNATURES)} signature(s) in webhook-signature "
                             "matches; check the signing secret")
    return Verified(delivery_id=delivery_id, id_is_signed=True, timestamp=stamp, signed_digest=_digest(content))


def _ed25519_matches(public_key: Ed25519PublicKey, value: str, content: bytes) -> bool:
    try:
        signature = base64.b64decode(value, validate=True)
        public_key.verify(signature, content)
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True


def _hmac_headers(verify: WebhookVerification, headers: Mapping[str, str], now: float) -> tuple[str, int] | Refusal:
    """(hex signature, timestamp) if well-formed and fresh."""
    header = verify.signature_header
    given = headers.get(header.lower())
    if given is None:
        return _unauthorized(f"missing {header}")
    stamp = _timestamp(headers.get(verify.timestamp_header.lower()), verify.timestamp_header,
                       verify.tolerance_seconds, now)
    if isinstance(stamp, Refusal):
        return stamp
    hex_digest = given.strip().lower().removeprefix("sha256=")
    if not _HEX_SHA256.fullmatch(hex_digest):
        return _unauthorized(f"{header} must be 64 hex digits (HMAC-SHA256), optionally prefixed sha256=")
    return hex_digest, stamp


def _hmac_with_timestamp(
    verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], body: bytes, now: float,
    *, mac: BodyMac | None,
) -> Verified | Refusal:
    header = verify.signature_header
    signed = _hmac_headers(verify, headers, now)
    if isinstance(signed, Refusal):
        return signed
    hex_digest, stamp = signed
    prefix = f"{stamp}.".encode()
    content = prefix + body
    if not hmac.compare_digest(_mac_of(keys.secret, prefix, body, mac).hex().encode(), _utf8(hex_digest)):
        return _unauthorized(f"{header} does not match HMAC-SHA256 of '<timestamp>.<body>'; check the secret")
    return Verified(delivery_id=None, id_is_signed=False, timestamp=stamp, signed_digest=_digest(content))


def _bearer(keys: SigningKeys, headers: Mapping[str, str], body: bytes) -> Verified | Refusal:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return _unauthorized("missing Authorization: Bearer <token>")
    assert keys.secret is not None
    if not hmac.compare_digest(_utf8(token.strip()), keys.secret):
        return _unauthorized("the bearer token does not match")
    return Verified(delivery_id=None, id_is_signed=False, timestamp=None, signed_digest=_digest(body))
