"""Standard Webhooks signing (webhook-id, webhook-timestamp, webhook-signature): `webhook.send` and the operator's
CloudEvents (towline.eventsink) sign with this one function.

`v1,` HMAC-SHA256 for `whsec_` secrets, `v1a,` ed25519 for `whsk_` keys; several space-separated secrets sign with
each, for rotation. This module must never put the secret, or anything derived from it other than the signature,
into a message or an error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline_connectors.errors import ActionError, ErrorClass


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def sign(secrets: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header value: one signature per secret, space-separated."""
    to_sign = f"{msg_id}.{timestamp}.".encode() + body
    signatures = []
    for secret in secrets.split():
        try:
            if secret.startswith("whsk_"):
                key = Ed25519PrivateKey.from_private_bytes(_b64decode(secret.removeprefix("whsk_")))
                signatures.append("v1a," + base64.b64encode(key.sign(to_sign)).decode())
            elif secret.startswith("whpk_"):
                raise ValueError("a whpk_ public key cannot sign")
            else:
                key_bytes = _b64decode(secret.removeprefix("whsec_"))
                digest = hmac.new(key_bytes, to_sign, hashlib.sha256).digest()
                signatures.append("v1," + base64.b64encode(digest).decode())
        except (ValueError, binascii.Error):
            raise ActionError(
                ErrorClass.AUTH,
                "the signing secret is not a Standard Webhooks secret (whsec_<base64> or whsk_<base64 ed25519 seed>); "
                "fix the Secret",
            ) from None
    if not signatures:
        raise ActionError(ErrorClass.AUTH, "the signing secret is empty; fix the Secret")
    return " ".join(signatures)
