"""What every signature scheme shares: the keys, the verdict, the streamed MAC, constant-time compares,
the timestamp window. Pure: time is an argument.

One meaning in one place: `verify` (GitHub, Standard Webhooks, hmac, bearer)
and `providers` (GitLab, Slack, Stripe, Shopify) both build on these, so a
timestamp is judged, a MAC compared and a refusal worded the same way for
every sender. Never puts a secret, a signature or the body into a message.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from towline.api.webhooks import WebhookVerification
from towline.triggers.ingress.outcome import Refusal

MAX_SIGNATURES = 8
"""Signatures checked per delivery: enough for a rotation, not enough to make ed25519 a cost lever."""

HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class SigningKeys:
    """The decoded key material of one trigger (from its Secret); never logged."""

    secret: bytes | None = None
    public_key: Ed25519PublicKey | None = None


@dataclass(frozen=True)
class Verified:
    """A delivery whose signature checked out (or a trigger that allows unsigned ones)."""

    delivery_id: str | None
    """The scheme's own delivery id (X-GitHub-Delivery, webhook-id, ...), if the sender sent one."""
    id_is_signed: bool
    """Whether the signature covers `delivery_id` (webhook-id is signed; X-GitHub-Delivery is not)."""
    timestamp: int | None
    """The signed timestamp, for schemes that sign one."""
    signed_digest: str
    """SHA-256 of everything the signature covers: the fallback identity of a delivery."""


class BodyMac:
    """HMAC-SHA256 of a delivery's signed content, fed chunk by chunk while the body arrives.

    Made once the headers passed the scheme's precheck, so the signed prefix
    (Standard Webhooks' `<id>.<timestamp>.`, Slack's `v0:<timestamp>:`, ...) is known.
    """

    def __init__(self, secret: bytes, prefix: bytes) -> None:
        self._mac = hmac.new(secret, prefix, hashlib.sha256)

    def update(self, chunk: bytes) -> None:
        self._mac.update(chunk)

    def digest(self) -> bytes:
        return self._mac.copy().digest()


def unauthorized(message: str) -> Refusal:
    return Refusal(401, "Unauthorized", message)


def digest(*parts: bytes) -> str:
    """SHA-256 over length-prefixed parts: no two different part lists give the same input."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.hexdigest()


def utf8(text: str) -> bytes:
    # Header values arrive decoded with surrogateescape; this restores the bytes as sent.
    return text.encode("utf-8", "surrogateescape")


def mac_of(secret: bytes | None, prefix: bytes, body: bytes, mac: BodyMac | None) -> bytes:
    """The HMAC-SHA256 of `prefix + body`: from the MAC fed while the body arrived, else computed here."""
    if mac is not None:
        return mac.digest()
    assert secret is not None, "decode_keys guarantees a secret for HMAC schemes"
    return hmac.new(secret, prefix + body, hashlib.sha256).digest()


def token_matches(keys: SigningKeys, given: str) -> bool:
    """A static token (bearer, X-Gitlab-Token) against the Secret's value, in constant time."""
    assert keys.secret is not None, "decode_keys guarantees a secret for token schemes"
    return hmac.compare_digest(utf8(given.strip()), keys.secret)


def signed_timestamp(text: str | None, header: str, tolerance: int, now: float) -> int | Refusal:
    """A Unix timestamp (seconds) within `tolerance` of `now`, in the past or the future."""
    if text is None:
        return unauthorized(f"missing {header}")
    if not re.fullmatch(r"[0-9]{1,12}", text.strip()):
        return unauthorized(f"{header} must be a Unix timestamp in seconds")
    stamp = int(text.strip())
    skew = stamp - now
    if skew > tolerance:
        return unauthorized(f"{header} is {skew:.0f} s in the future, beyond the {tolerance} s tolerance; "
                            "check the sender's clock")
    if -skew > tolerance:
        return unauthorized(f"{header} is {-skew:.0f} s old, beyond the {tolerance} s tolerance; "
                            "a replayed or long-delayed delivery is refused")
    return stamp


@dataclass(frozen=True)
class TimestampedHexMac:
    """A scheme that signs `prefix(timestamp) + body` with hex HMAC-SHA256 of the whole secret and names no
    signed delivery id: Slack's `v0:<t>:`, Stripe's and the `hmac` scheme's `<t>.`."""

    signatures: Callable[[WebhookVerification, Mapping[str, str], float], tuple[list[str], int] | Refusal]
    """The headers -> (well-formed hex signatures, a fresh timestamp), or what they lack."""
    prefix: Callable[[int], bytes]
    """What the sender signs before the body, given the timestamp."""
    mismatch: Callable[[int], str]
    """The refusal when none of that many signatures matches: which header, over what, which secret to check."""

    def body_mac(self, verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], *, now: float,
                 ) -> BodyMac | None:
        """The MAC to feed with the body once the headers passed; None without a secret or usable headers."""
        if keys.secret is None:
            return None
        signed = self.signatures(verify, headers, now)
        return None if isinstance(signed, Refusal) else BodyMac(keys.secret, self.prefix(signed[1]))

    def verify(self, verify: WebhookVerification, keys: SigningKeys, headers: Mapping[str, str], body: bytes, *,
               now: float, mac: BodyMac | None) -> Verified | Refusal:
        """Any one signature matching passes (several during a secret rotation)."""
        signed = self.signatures(verify, headers, now)
        if isinstance(signed, Refusal):
            return signed
        signatures, stamp = signed
        prefix = self.prefix(stamp)
        expected = mac_of(keys.secret, prefix, body, mac).hex().encode()
        if not any(hmac.compare_digest(expected, utf8(value)) for value in signatures):
            return unauthorized(self.mismatch(len(signatures)))
        return Verified(delivery_id=None, id_is_signed=False, timestamp=stamp, signed_digest=digest(prefix + body))
