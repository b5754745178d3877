"""What of a refused delivery the ingress keeps: no credential header, no signing key, a capped body; which
outcomes are kept."""

from __future__ import annotations

import json

from towline.k8s.deliveryletters import (
    MAX_PAYLOAD_BYTES,
    DeliveryLetter,
    kept_headers,
    letter_from,
    letter_text,
    payload_of,
)
from towline.logs import remember_secret
from towline.triggers.ingress.deliveries import Accepted, kept_reason
from towline.triggers.ingress.outcome import Refusal

KEY = "whsec_dW5pdC1jYW5hcnktc2lnbmluZy1rZXktMDEyMzQ1"


def test_no_header_that_carries_a_credential_or_a_signature_is_kept() -> None:
    headers = {"authorization": "Bearer abc", "cookie": "s=1", "webhook-signature": "v1,xyz", "webhook-id": "msg_1",
               "x-hub-signature-256": "sha256=00", "x-gitlab-token": "t", "stripe-signature": "t=1,v1=2",
               "x-shopify-hmac-sha256": "h", "x-slack-signature": "v0=1", "x-api-key": "k",
               "x-custom-sig": "s", "content-type": "application/json", "user-agent": "sender/1"}
    kept = kept_headers(headers, ("x-custom-sig",))
    assert kept == {"content-type": "application/json", "user-agent": "sender/1", "webhook-id": "msg_1"}


def test_a_signing_key_the_ingress_knows_is_stored_redacted() -> None:
    remember_secret(KEY)
    letter = DeliveryLetter(namespace="shop", workflow="orders", trigger="paid", reason="Filtered",
                            failed_at="2026-12-07T08:00:00Z", size=40, payload={"echo": KEY}, data={"id": KEY})
    text = letter_text(letter)
    assert KEY not in text and "[REDACTED]" in text
    back = letter_from(text)
    assert back is not None and back.id == letter.id and back.payload == {"echo": "[REDACTED]"}


def test_a_body_over_the_cap_is_kept_as_its_size_only() -> None:
    assert payload_of(b"x" * (MAX_PAYLOAD_BYTES + 1), "x" * (MAX_PAYLOAD_BYTES + 1)) is None
    assert payload_of(b'{"a": 1}', {"a": 1}) == {"a": 1}


def test_kept_outcomes_are_the_verified_refusals_only() -> None:
    assert kept_reason(Accepted(202, None, "filtered: the trigger's filter is false for this delivery")) == "Filtered"
    assert kept_reason(Refusal(409, "Suspended", "suspended")) == "Suspended"
    assert kept_reason(Refusal(409, "WorkflowInvalid", "not valid")) == "WorkflowInvalid"
    assert kept_reason(Refusal(503, "ApiServerBusy", "busy")) == "ApiServerBusy"
    assert kept_reason(Accepted(202, "run-1", "run created")) is None
    assert kept_reason(Accepted(202, None, "ignored: type not matched; no run started")) is None
    for reason in ("Unauthorized", "RateLimited", "BadBody", "NotFound"):
        assert kept_reason(Refusal(400, reason, "no")) is None


def test_a_letter_reads_back_as_written() -> None:
    letter = DeliveryLetter(namespace="a", workflow="w", trigger="t", reason="BodyTooLarge",
                            failed_at="2026-12-07T08:00:00Z", size=10_000_000, headers={"content-type": "text/plain"})
    assert json.loads(letter_text(letter))["kind"] == "delivery"
    assert letter_from(letter_text(letter)) == letter
