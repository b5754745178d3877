"""Signature verification: published test vectors, every scheme's refusals, the timestamp window both ways."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline.api.webhooks import WebhookVerification
from towline.triggers.ingress import sign
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.verify import Verified, decode_keys, precheck, verify_delivery

# GitHub's documented example ("Validating webhook deliveries").
GITHUB_SECRET = b"It's a Secret to Everybody"
TOKEN = "s3cret-token-of-32-bytes-length"
GITHUB_PAYLOAD = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

# The Standard Webhooks reference libraries' signing vectors (HMAC v1 and ed25519 v1a).
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIMESTAMP = 1614265330
SW_PAYLOAD = b'{"test": 2432232314}'
SW_V1 = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
SW_ED25519_PRIVATE = "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
SW_V1A = "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="

NOW = float(SW_TIMESTAMP)


def verification(scheme: str, **extra: Any) -> WebhookVerification:
    ref = {"secretRef": {"name": "hook", "key": "secret"}} if scheme != "none" else {}
    return WebhookVerification.model_validate({"scheme": scheme, **ref, **extra})


def sw_public_key() -> bytes:
    private = Ed25519PrivateKey.from_private_bytes(base64.b64decode(SW_ED25519_PRIVATE))
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return b"whpk_" + base64.b64encode(raw)


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def refused(outcome: Verified | Refusal, status: int, words: str) -> None:
    assert isinstance(outcome, Refusal), outcome
    assert outcome.status == status
    assert words in outcome.message


def test_github_documented_vector_verifies() -> None:
    keys = decode_keys("github", GITHUB_SECRET, None)
    headers = {"x-hub-signature-256": GITHUB_SIGNATURE, "x-github-delivery": "d-1"}
    outcome = verify_delivery(verification("github"), keys, headers, GITHUB_PAYLOAD, now=NOW)
    assert isinstance(outcome, Verified)
    assert outcome.delivery_id == "d-1"
    assert lower(sign.github_headers(GITHUB_SECRET, GITHUB_PAYLOAD))["x-hub-signature-256"] == GITHUB_SIGNATURE


def test_github_signature_over_another_body_is_refused() -> None:
    keys = decode_keys("github", GITHUB_SECRET, None)
    outcome = verify_delivery(verification("github"), keys, {"x-hub-signature-256": GITHUB_SIGNATURE},
                              b"Hello, World?", now=NOW)
    refused(outcome, 401, "does not match")


def test_github_sha1_signature_is_refused() -> None:
    keys = decode_keys("github", GITHUB_SECRET, None)
    outcome = verify_delivery(verification("github"), keys, {"x-hub-signature": "sha1=" + "0" * 40},
                              GITHUB_PAYLOAD, now=NOW)
    refused(outcome, 401, "SHA-1 signatures (X-Hub-Signature) are refused")


@pytest.mark.parametrize("value", ["", "sha256=", "sha256=zz", "md5=" + "0" * 64, "0" * 64])
def test_github_malformed_signature_is_refused(value: str) -> None:
    keys = decode_keys("github", GITHUB_SECRET, None)
    outcome = verify_delivery(verification("github"), keys, {"x-hub-signature-256": value}, GITHUB_PAYLOAD, now=NOW)
    refused(outcome, 401, "X-Hub-Signature-256")


def test_standard_webhooks_hmac_vector_verifies() -> None:
    keys = decode_keys("standard-webhooks", SW_SECRET.encode(), None)
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP), "webhook-signature": SW_V1}
    outcome = verify_delivery(verification("standard-webhooks"), keys, headers, SW_PAYLOAD, now=NOW)
    assert isinstance(outcome, Verified)
    assert outcome.delivery_id == SW_ID
    assert sign.standard_webhooks_headers(SW_SECRET, SW_ID, SW_TIMESTAMP, SW_PAYLOAD)["webhook-signature"] == SW_V1


def test_standard_webhooks_ed25519_vector_verifies() -> None:
    keys = decode_keys("standard-webhooks", None, sw_public_key())
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP), "webhook-signature": SW_V1A}
    verify = WebhookVerification.model_validate(
        {"scheme": "standard-webhooks", "publicKeyRef": {"name": "hook", "key": "public"}})
    assert isinstance(verify_delivery(verify, keys, headers, SW_PAYLOAD, now=NOW), Verified)
    private = Ed25519PrivateKey.from_private_bytes(base64.b64decode(SW_ED25519_PRIVATE))
    signed = sign.standard_webhooks_ed25519_headers(private, SW_ID, SW_TIMESTAMP, SW_PAYLOAD)
    assert signed["webhook-signature"] == SW_V1A


def test_standard_webhooks_accepts_one_valid_among_several_signatures() -> None:
    keys = decode_keys("standard-webhooks", SW_SECRET.encode(), None)
    rotated = f"v1,{'A' * 44} v2,whatever {SW_V1} v1a,{'B' * 88}"
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP), "webhook-signature": rotated}
    assert isinstance(verify_delivery(verification("standard-webhooks"), keys, headers, SW_PAYLOAD, now=NOW), Verified)


def test_standard_webhooks_ed25519_signature_is_not_accepted_with_only_an_hmac_secret() -> None:
    keys = decode_keys("standard-webhooks", SW_SECRET.encode(), None)
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP), "webhook-signature": SW_V1A}
    refused(verify_delivery(verification("standard-webhooks"), keys, headers, SW_PAYLOAD, now=NOW), 401, "matches")


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_standard_webhooks_missing_header_is_refused(missing: str) -> None:
    keys = decode_keys("standard-webhooks", SW_SECRET.encode(), None)
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP), "webhook-signature": SW_V1}
    del headers[missing]
    refused(verify_delivery(verification("standard-webhooks"), keys, headers, SW_PAYLOAD, now=NOW), 401, missing)


@pytest.mark.parametrize(("offset", "words"), [(-301, "s old"), (301, "in the future")])
def test_timestamp_outside_the_window_is_refused_both_ways(offset: int, words: str) -> None:
    keys = decode_keys("standard-webhooks", SW_SECRET.encode(), None)
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP), "webhook-signature": SW_V1}
    outcome = verify_delivery(verification("standard-webhooks"), keys, headers, SW_PAYLOAD, now=NOW - offset)
    refused(outcome, 401, words)
    inside = verify_delivery(verification("standard-webhooks"), keys, headers, SW_PAYLOAD, now=NOW - offset // 2)
    assert isinstance(inside, Verified)


def test_hmac_with_timestamp_verifies_and_binds_the_timestamp() -> None:
    secret = b"generic-secret-of-32-bytes-length"
    verify = verification("hmac", signatureHeader="X-Shop-Signature", timestampHeader="X-Shop-Time")
    keys = decode_keys("hmac", secret, None)
    headers = lower(sign.hmac_headers(secret, 1000, b"{}", signature_header="X-Shop-Signature",
                                      timestamp_header="X-Shop-Time"))
    assert isinstance(verify_delivery(verify, keys, headers, b"{}", now=1000.0), Verified)
    headers["x-shop-time"] = "1001"
    refused(verify_delivery(verify, keys, headers, b"{}", now=1000.0), 401, "does not match")
    del headers["x-shop-time"]
    refused(verify_delivery(verify, keys, headers, b"{}", now=1000.0), 401, "missing X-Shop-Time")


def test_bearer_token_is_compared_exactly() -> None:
    keys = decode_keys("bearer", TOKEN.encode() + b"\n", None)
    assert isinstance(verify_delivery(verification("bearer"), keys, {"authorization": f"Bearer {TOKEN}"},
                                      b"{}", now=NOW), Verified)
    refused(verify_delivery(verification("bearer"), keys, {"authorization": f"Bearer {TOKEN[:-1]}j"}, b"{}", now=NOW),
            401, "does not match")
    refused(verify_delivery(verification("bearer"), keys, {}, b"{}", now=NOW), 401, "missing Authorization")


def test_unsigned_needs_the_explicit_opt_in() -> None:
    keys = decode_keys("none", None, None)
    opted_out = WebhookVerification.model_construct(scheme="none", allow_unsigned=False, tolerance_seconds=300)
    refused(verify_delivery(opted_out, keys, {}, b"{}", now=NOW), 401, "allowUnsigned")
    assert isinstance(verify_delivery(verification("none", allowUnsigned=True), keys, {}, b"{}", now=NOW), Verified)


@pytest.mark.parametrize(("scheme", "secret", "public", "words"), [
    ("standard-webhooks", b"whsec_not base64!", None, "whsec_"),
    ("standard-webhooks", None, b"whpk_" + base64.b64encode(b"short"), "32 bytes"),
    ("github", b"   ", None, "0 bytes; use at least 16"),
    ("github", b"team-b", None, "6 bytes; use at least 16"),
    ("standard-webhooks", b"whsec_" + base64.b64encode(b"nine-byte"), None, "9 bytes; use at least 16"),
])
def test_unusable_key_material_says_what_it_should_look_like(
    scheme: str, secret: bytes | None, public: bytes | None, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        decode_keys(scheme, secret, public)


def test_a_bad_bearer_token_or_stale_timestamp_is_refused_before_the_body_is_read() -> None:
    keys = decode_keys("bearer", TOKEN.encode(), None)
    refused(precheck(verification("bearer"), keys, {"authorization": "Bearer guess"}, now=NOW), 401, "does not match")
    assert precheck(verification("bearer"), keys, {"authorization": f"Bearer {TOKEN}"},
                    now=NOW) is None
    sw_keys = decode_keys("standard-webhooks", SW_SECRET.encode(), None)
    stale = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TIMESTAMP), "webhook-signature": SW_V1}
    refused(precheck(verification("standard-webhooks"), sw_keys, stale, now=NOW + 3600), 401, "s old")
    refused(precheck(verification("github"), keys, {}, now=NOW), 401, "missing X-Hub-Signature-256")
