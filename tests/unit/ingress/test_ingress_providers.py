"""GitLab, Slack, Stripe and Shopify: each provider's example or documented algorithm, and every refusal.

Vectors: Slack's is the example of its "Verifying requests from Slack" page.
Stripe and Shopify publish the algorithm but no complete example (secret,
body and signature together), so theirs are built from the documented
algorithm: Stripe's with the payload and secret of stripe-python's own webhook
tests and the timestamp of Stripe's documented header example, and accepted by
stripe-python 12.5.1's `WebhookSignature.verify_header`; Shopify's computed
independently with `openssl dgst -sha256 -hmac ... -binary | base64`. GitLab
signs nothing: its secret token is compared as it is.
"""

from __future__ import annotations

from typing import Any

import pytest

from towline.api.webhooks import WebhookTrigger, WebhookVerification
from towline.triggers.ingress import sign
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.providers import slack_challenge
from towline.triggers.ingress.runname import DeliveryIdentity, delivery_identity
from towline.triggers.ingress.verify import Verified, body_mac, decode_keys, precheck, verify_delivery

SLACK_SECRET = b"8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TIMESTAMP = 1531420618
SLACK_BODY = (b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&"
              b"channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&"
              b"response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskX"
              b"aIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
SLACK_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"

STRIPE_SECRET = b"whsec_test_secret"
STRIPE_TIMESTAMP = 1492774577
STRIPE_BODY = b'{\n  "id": "evt_test_webhook",\n  "object": "event"\n}'
STRIPE_V1 = "c2f890decbc5ede7c5060bb9a6d31e0626a4342bacb9aeae2adb1bcea72f9812"

SHOPIFY_SECRET = b"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"
SHOPIFY_BODY = b'{"id":820982911946154508,"email":"jon@doe.ca","topic":"orders/create"}'
SHOPIFY_HMAC = "SXPbJY2hrQ2GEp7HqX/aBXFO+V5X94ZfJYMjy2IrZRo="

GITLAB_TOKEN = b"gitlab-token-of-32-bytes-length!"
OTHER_SECRET = b"another-secret-of-32-bytes-long!"


def verification(scheme: str, **extra: Any) -> WebhookVerification:
    return WebhookVerification.model_validate({"scheme": scheme, "secretRef": {"name": "hook", "key": "k"}, **extra})


def check(scheme: str, secret: bytes, headers: dict[str, str], body: bytes, now: float) -> Verified | Refusal:
    """Verify as the ingress does: the header checks first, then the MAC fed with the body."""
    verify, keys = verification(scheme), decode_keys(scheme, secret, None)
    lower = {name.lower(): value for name, value in headers.items()}
    early = precheck(verify, keys, lower, now=now)
    if early is not None:
        return early
    mac = body_mac(verify, keys, lower, now=now)
    if mac is not None:
        mac.update(body)
    return verify_delivery(verify, keys, lower, body, now=now, mac=mac)


def refused(outcome: Verified | Refusal, words: str) -> None:
    assert isinstance(outcome, Refusal), outcome
    assert (outcome.status, outcome.reason) == (401, "Unauthorized")
    assert words in outcome.message, outcome.message


def slack(**changes: str | None) -> dict[str, str]:
    headers: dict[str, str | None] = {"X-Slack-Signature": SLACK_SIGNATURE,
                                      "X-Slack-Request-Timestamp": str(SLACK_TIMESTAMP), **changes}
    return {name: value for name, value in headers.items() if value is not None}


def test_slack_documented_example_verifies_and_signs_alike() -> None:
    outcome = check("slack", SLACK_SECRET, slack(), SLACK_BODY, now=SLACK_TIMESTAMP)
    assert isinstance(outcome, Verified)
    assert outcome.timestamp == SLACK_TIMESTAMP and outcome.delivery_id is None
    assert sign.slack_headers(SLACK_SECRET, SLACK_TIMESTAMP, SLACK_BODY)["X-Slack-Signature"] == SLACK_SIGNATURE


@pytest.mark.parametrize(("secret", "body", "headers", "words"), [
    (SLACK_SECRET, SLACK_BODY.replace(b"foobar", b"foobaz"), slack(), "does not match"),
    (OTHER_SECRET, SLACK_BODY, slack(), "does not match"),
    (SLACK_SECRET, SLACK_BODY, slack(**{"X-Slack-Request-Timestamp": str(SLACK_TIMESTAMP + 1)}), "does not match"),
    (SLACK_SECRET, SLACK_BODY, slack(**{"X-Slack-Signature": None}), "missing X-Slack-Signature"),
    (SLACK_SECRET, SLACK_BODY, slack(**{"X-Slack-Request-Timestamp": None}), "missing X-Slack-Request-Timestamp"),
    (SLACK_SECRET, SLACK_BODY, slack(**{"X-Slack-Signature": "v1=" + SLACK_SIGNATURE[3:]}), "must be v0="),
    (SLACK_SECRET, SLACK_BODY, slack(**{"X-Slack-Signature": SLACK_SIGNATURE[:-2]}), "must be v0="),
    (SLACK_SECRET, SLACK_BODY, slack(**{"X-Slack-Request-Timestamp": "yesterday"}), "Unix timestamp"),
], ids=["tampered-body", "wrong-secret", "other-timestamp", "no-signature", "no-timestamp", "wrong-version",
        "short-signature", "malformed-timestamp"])
def test_slack_refusals(secret: bytes, body: bytes, headers: dict[str, str], words: str) -> None:
    refused(check("slack", secret, headers, body, now=SLACK_TIMESTAMP), words)


@pytest.mark.parametrize(("offset", "words"), [(301, "s old"), (-301, "in the future")])
def test_slack_refuses_outside_five_minutes_both_ways(offset: int, words: str) -> None:
    assert verification("slack").tolerance_seconds == 300
    refused(check("slack", SLACK_SECRET, slack(), SLACK_BODY, now=SLACK_TIMESTAMP + offset), words)
    inside = check("slack", SLACK_SECRET, slack(), SLACK_BODY, now=SLACK_TIMESTAMP + offset - offset // abs(offset))
    assert isinstance(inside, Verified)


def stripe(value: str) -> dict[str, str]:
    return {"Stripe-Signature": value}


def test_stripe_signature_verifies_and_signs_alike() -> None:
    outcome = check("stripe", STRIPE_SECRET, stripe(f"t={STRIPE_TIMESTAMP},v1={STRIPE_V1}"), STRIPE_BODY,
                    now=STRIPE_TIMESTAMP)
    assert isinstance(outcome, Verified) and outcome.timestamp == STRIPE_TIMESTAMP
    signed = sign.stripe_headers([STRIPE_SECRET], STRIPE_TIMESTAMP, STRIPE_BODY)
    assert signed == stripe(f"t={STRIPE_TIMESTAMP},v1={STRIPE_V1}")


def test_stripe_secret_is_used_whole_not_base64_decoded() -> None:
    """Unlike a Standard Webhooks whsec_, Stripe's whsec_ string itself is the HMAC key."""
    assert decode_keys("stripe", STRIPE_SECRET, None).secret == STRIPE_SECRET


def test_stripe_accepts_any_one_valid_v1_during_a_secret_rotation() -> None:
    rotating = sign.stripe_headers([OTHER_SECRET, STRIPE_SECRET], STRIPE_TIMESTAMP, STRIPE_BODY)
    assert rotating["Stripe-Signature"].count("v1=") == 2
    assert isinstance(check("stripe", STRIPE_SECRET, rotating, STRIPE_BODY, now=STRIPE_TIMESTAMP), Verified)
    with_v0 = stripe(f"t={STRIPE_TIMESTAMP},v1={'0' * 64},v1={STRIPE_V1},v0={'f' * 64}")
    assert isinstance(check("stripe", STRIPE_SECRET, with_v0, STRIPE_BODY, now=STRIPE_TIMESTAMP), Verified)
    old_only = sign.stripe_headers([OTHER_SECRET], STRIPE_TIMESTAMP, STRIPE_BODY)
    refused(check("stripe", STRIPE_SECRET, old_only, STRIPE_BODY, now=STRIPE_TIMESTAMP), "none of the 1 v1")


@pytest.mark.parametrize(("secret", "body", "value", "words"), [
    (STRIPE_SECRET, STRIPE_BODY.replace(b"evt_test", b"evt_evil"), f"t={STRIPE_TIMESTAMP},v1={STRIPE_V1}",
     "none of the 1 v1"),
    (OTHER_SECRET, STRIPE_BODY, f"t={STRIPE_TIMESTAMP},v1={STRIPE_V1}", "none of the 1 v1"),
    (STRIPE_SECRET, STRIPE_BODY, f"t={STRIPE_TIMESTAMP + 1},v1={STRIPE_V1}", "none of the 1 v1"),
    (STRIPE_SECRET, STRIPE_BODY, "", "missing Stripe-Signature"),
    (STRIPE_SECRET, STRIPE_BODY, f"v1={STRIPE_V1}", "exactly one t="),
    (STRIPE_SECRET, STRIPE_BODY, f"t={STRIPE_TIMESTAMP},t={STRIPE_TIMESTAMP},v1={STRIPE_V1}", "exactly one t="),
    (STRIPE_SECRET, STRIPE_BODY, f"t={STRIPE_TIMESTAMP},v0={STRIPE_V1}", "no v1 signature"),
    (STRIPE_SECRET, STRIPE_BODY, f"t={STRIPE_TIMESTAMP},v1=zz{STRIPE_V1[2:]}", "64 hex digits"),
    (STRIPE_SECRET, STRIPE_BODY, f"t=soon,v1={STRIPE_V1}", "Unix timestamp"),
], ids=["tampered-body", "wrong-secret", "other-timestamp", "no-header", "no-timestamp", "two-timestamps",
        "only-v0", "malformed-v1", "malformed-timestamp"])
def test_stripe_refusals(secret: bytes, body: bytes, value: str, words: str) -> None:
    headers = stripe(value) if value else {}
    refused(check("stripe", secret, headers, body, now=STRIPE_TIMESTAMP), words)


@pytest.mark.parametrize(("offset", "words"), [(301, "s old"), (-301, "in the future")])
def test_stripe_refuses_outside_the_five_minute_tolerance_both_ways(offset: int, words: str) -> None:
    headers = stripe(f"t={STRIPE_TIMESTAMP},v1={STRIPE_V1}")
    refused(check("stripe", STRIPE_SECRET, headers, STRIPE_BODY, now=STRIPE_TIMESTAMP + offset), words)


def shopify(**changes: str | None) -> dict[str, str]:
    headers: dict[str, str | None] = {"X-Shopify-Hmac-Sha256": SHOPIFY_HMAC, "X-Shopify-Webhook-Id": "b54557e4",
                                      **changes}
    return {name: value for name, value in headers.items() if value is not None}


def test_shopify_signature_verifies_and_signs_alike() -> None:
    outcome = check("shopify", SHOPIFY_SECRET, shopify(), SHOPIFY_BODY, now=0)
    assert isinstance(outcome, Verified)
    assert (outcome.delivery_id, outcome.id_is_signed, outcome.timestamp) == ("b54557e4", False, None)
    assert sign.shopify_headers(SHOPIFY_SECRET, SHOPIFY_BODY)["X-Shopify-Hmac-Sha256"] == SHOPIFY_HMAC


def test_shopify_events_headers_without_the_x_prefix_verify() -> None:
    headers = {"Shopify-Hmac-Sha256": SHOPIFY_HMAC, "Shopify-Webhook-Id": "evt-1"}
    outcome = check("shopify", SHOPIFY_SECRET, headers, SHOPIFY_BODY, now=0)
    assert isinstance(outcome, Verified) and outcome.delivery_id == "evt-1"


@pytest.mark.parametrize(("secret", "body", "headers", "words"), [
    (SHOPIFY_SECRET, SHOPIFY_BODY.replace(b"jon", b"eve"), shopify(), "does not match"),
    (OTHER_SECRET, SHOPIFY_BODY, shopify(), "does not match"),
    (SHOPIFY_SECRET, SHOPIFY_BODY, shopify(**{"X-Shopify-Hmac-Sha256": None}), "missing X-Shopify-Hmac-Sha256"),
    (SHOPIFY_SECRET, SHOPIFY_BODY, shopify(**{"X-Shopify-Hmac-Sha256": SHOPIFY_HMAC[:-4]}), "32-byte"),
    (SHOPIFY_SECRET, SHOPIFY_BODY, shopify(**{"X-Shopify-Hmac-Sha256": "not base64!"}), "32-byte"),
    (SHOPIFY_SECRET, SHOPIFY_BODY, shopify(**{"X-Shopify-Hmac-Sha256": bytes.fromhex("ab" * 32).hex()}), "32-byte"),
], ids=["tampered-body", "wrong-secret", "no-header", "short", "not-base64", "hex-instead-of-base64"])
def test_shopify_refusals(secret: bytes, body: bytes, headers: dict[str, str], words: str) -> None:
    refused(check("shopify", secret, headers, body, now=0), words)


def test_gitlab_token_verifies_in_constant_time_and_carries_the_idempotency_key() -> None:
    headers = sign.gitlab_headers(GITLAB_TOKEN.decode(), "6d2b8f1e-idem")
    outcome = check("gitlab", GITLAB_TOKEN + b"\n", headers, b"{}", now=0)
    assert isinstance(outcome, Verified)
    assert (outcome.delivery_id, outcome.id_is_signed, outcome.timestamp) == ("6d2b8f1e-idem", False, None)
    older_gitlab = check("gitlab", GITLAB_TOKEN, {"X-Gitlab-Token": GITLAB_TOKEN.decode(),
                                                  "X-Gitlab-Event-UUID": "ev-1"}, b"{}", now=0)
    assert isinstance(older_gitlab, Verified) and older_gitlab.delivery_id == "ev-1"


@pytest.mark.parametrize(("headers", "words"), [
    ({"X-Gitlab-Token": GITLAB_TOKEN.decode()[:-1] + "?"}, "does not match"),
    ({"X-Gitlab-Token": OTHER_SECRET.decode()}, "does not match"),
    ({"X-Gitlab-Token": ""}, "missing X-Gitlab-Token"),
    ({"Authorization": f"Bearer {GITLAB_TOKEN.decode()}"}, "missing X-Gitlab-Token"),
], ids=["one-character-off", "wrong-token", "empty", "bearer-instead"])
def test_gitlab_refusals_come_before_the_body_is_read(headers: dict[str, str], words: str) -> None:
    lower = {name.lower(): value for name, value in headers.items()}
    early = precheck(verification("gitlab"), decode_keys("gitlab", GITLAB_TOKEN, None), lower, now=0)
    assert early is not None
    refused(early, words)


def test_stale_or_missing_signatures_are_refused_before_the_body_is_read() -> None:
    stale = {"x-slack-signature": SLACK_SIGNATURE, "x-slack-request-timestamp": str(SLACK_TIMESTAMP)}
    early = precheck(verification("slack"), decode_keys("slack", SLACK_SECRET, None), stale, now=SLACK_TIMESTAMP + 3600)
    assert early is not None
    refused(early, "s old")
    keys = decode_keys("stripe", STRIPE_SECRET, None)
    stripe_stale = {"stripe-signature": f"t={STRIPE_TIMESTAMP},v1={STRIPE_V1}"}
    stripe_early = precheck(verification("stripe"), keys, stripe_stale, now=STRIPE_TIMESTAMP + 3600)
    assert stripe_early is not None
    refused(stripe_early, "s old")
    shopify_early = precheck(verification("shopify"), keys, {}, now=0)
    assert shopify_early is not None
    refused(shopify_early, "missing X-Shopify-Hmac-Sha256")


@pytest.mark.parametrize("scheme", ["gitlab", "slack", "stripe", "shopify"])
def test_short_provider_secrets_are_never_used(scheme: str) -> None:
    with pytest.raises(ValueError, match="use at least 16"):
        decode_keys(scheme, b"short", None)


def trigger(scheme: str, **extra: Any) -> WebhookTrigger:
    return WebhookTrigger.model_validate({"verify": {"scheme": scheme, "secretRef": {"name": "h", "key": "k"}},
                                          **extra})


def test_a_stripe_event_is_named_by_its_signed_id_so_a_re_signed_retry_finds_its_run() -> None:
    first = Verified(delivery_id=None, id_is_signed=False, timestamp=1000, signed_digest="aa" * 32)
    retry = Verified(delivery_id=None, id_is_signed=False, timestamp=1600, signed_digest="bb" * 32)
    body = {"id": "evt_1", "object": "event"}
    expected = DeliveryIdentity("id:evt_1", "evt_1", keyed_by_id=True)
    assert delivery_identity(trigger("stripe"), first, {}, body, now=1000) == expected
    assert delivery_identity(trigger("stripe"), retry, {}, body, now=1600) == expected
    configured = delivery_identity(trigger("stripe", deliveryId={"field": "data.object.id"}), first, {},
                                   {"id": "evt_1", "data": {"object": {"id": "pi_7"}}}, now=1000)
    assert configured == DeliveryIdentity("id:pi_7", "pi_7", keyed_by_id=True)


def test_a_slack_event_is_named_by_its_event_id_and_a_slash_command_by_what_is_signed() -> None:
    verified = Verified(delivery_id=None, id_is_signed=False, timestamp=1000, signed_digest="aa" * 32)
    events_api = delivery_identity(trigger("slack"), verified, {}, {"event_id": "Ev08"}, now=1000)
    assert events_api == DeliveryIdentity("id:Ev08", "Ev08", keyed_by_id=True)
    command = delivery_identity(trigger("slack"), verified, {}, {"command": "/deploy"}, now=1000)
    assert command == DeliveryIdentity(f"signed:{'aa' * 32}", None, keyed_by_id=False)


def test_a_shopify_delivery_is_named_by_its_body_never_its_unsigned_webhook_id() -> None:
    first = Verified(delivery_id="wh-1", id_is_signed=False, timestamp=None, signed_digest="aa" * 32)
    resent = Verified(delivery_id="wh-2", id_is_signed=False, timestamp=None, signed_digest="aa" * 32)
    one = delivery_identity(trigger("shopify"), first, {}, {}, now=0)
    two = delivery_identity(trigger("shopify"), resent, {}, {}, now=10**9)
    assert one == DeliveryIdentity(f"body:{'aa' * 32}", "wh-1", keyed_by_id=False)
    assert isinstance(two, DeliveryIdentity) and isinstance(one, DeliveryIdentity)
    assert two.key == one.key


def test_a_gitlab_delivery_is_named_by_its_idempotency_key_as_nothing_is_signed() -> None:
    verified = Verified(delivery_id="idem-1", id_is_signed=False, timestamp=None, signed_digest="aa" * 32)
    assert delivery_identity(trigger("gitlab"), verified, {}, {}, now=0) == DeliveryIdentity(
        "id:idem-1", "idem-1", keyed_by_id=True)
    without = Verified(delivery_id=None, id_is_signed=False, timestamp=None, signed_digest="aa" * 32)
    by_content = delivery_identity(trigger("gitlab"), without, {}, {}, now=0)
    assert isinstance(by_content, DeliveryIdentity) and by_content.key.startswith("content:")


def test_slack_url_verification_yields_its_challenge_and_nothing_else_does() -> None:
    documented = (b'{"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", '
                  b'"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}')
    assert slack_challenge("application/json", documented) == "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    assert slack_challenge("application/x-www-form-urlencoded", documented) is None
    assert slack_challenge("application/json", b'{"type": "event_callback", "challenge": "x"}') is None
    assert slack_challenge("application/json", b'{"type": "url_verification", "challenge": "<script>"}') is None
    assert slack_challenge("application/json", b'{"type": "url_verification", "challenge": 7}') is None
    assert slack_challenge("application/json", b"[1, 2]") is None
    assert slack_challenge("application/json", b"not json") is None
