"""Run names from delivery identity, the trigger's filter and data mapping, and per-trigger rate limits."""

from __future__ import annotations

import re
from typing import Any

from towline.api.webhooks import WebhookTrigger
from towline.triggers.ingress.limits import RateLimiter
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.payload import parse_body, passes_filter, trigger_data, visible_headers
from towline.triggers.ingress.runname import DeliveryIdentity, delivery_identity, webhook_run_name
from towline.triggers.ingress.verify import Verified


def trigger(**extra: Any) -> WebhookTrigger:
    return WebhookTrigger.model_validate(
        {"verify": {"scheme": "github", "secretRef": {"name": "hook", "key": "secret"}}, **extra})


GITHUB = Verified(delivery_id="gh-1", id_is_signed=False, timestamp=None, signed_digest="ab" * 32)
STANDARD = Verified(delivery_id="msg_1", id_is_signed=True, timestamp=1000, signed_digest="cd" * 32)


def standard(**extra: Any) -> WebhookTrigger:
    return WebhookTrigger.model_validate(
        {"verify": {"scheme": "standard-webhooks", "secretRef": {"name": "hook", "key": "secret"}}, **extra})


def test_a_github_delivery_is_named_by_its_body_not_its_unsigned_delivery_header() -> None:
    identity = delivery_identity(trigger(), GITHUB, {}, {}, now=0)
    assert isinstance(identity, DeliveryIdentity)
    assert identity.key == "body:" + "ab" * 32 and identity.delivery_id == "gh-1"
    replayed = Verified(delivery_id="gh-2", id_is_signed=False, timestamp=None, signed_digest="ab" * 32)
    later = delivery_identity(trigger(), replayed, {}, {}, now=10**9)
    assert isinstance(later, DeliveryIdentity) and later.key == identity.key


def test_the_signed_webhook_id_names_a_standard_webhooks_run() -> None:
    assert delivery_identity(standard(), STANDARD, {}, {}, now=0) == DeliveryIdentity("id:msg_1", "msg_1", True)


def test_a_configured_header_never_overrides_what_is_signed() -> None:
    by_header = standard(deliveryId={"header": "X-Order-Event"})
    first = delivery_identity(by_header, STANDARD, {"x-order-event": "e-7"}, {}, now=0)
    again = delivery_identity(by_header, STANDARD, {"x-order-event": "e-8"}, {}, now=0)
    assert isinstance(first, DeliveryIdentity) and isinstance(again, DeliveryIdentity)
    assert first.key == again.key == "id:msg_1"
    github = delivery_identity(trigger(deliveryId={"header": "X-Order-Event"}), GITHUB, {"x-order-event": "e-7"},
                               {}, now=0)
    assert isinstance(github, DeliveryIdentity)
    assert github.key == "body:" + "ab" * 32 and github.delivery_id == "e-7" and not github.keyed_by_id


def test_a_configured_header_names_the_run_only_where_nothing_is_signed() -> None:
    bearer = WebhookTrigger.model_validate({"verify": {"scheme": "bearer", "secretRef": {"name": "h", "key": "t"}},
                                            "deliveryId": {"header": "X-Order-Event"}})
    unsigned = Verified(delivery_id=None, id_is_signed=False, timestamp=None, signed_digest="ef" * 32)
    assert delivery_identity(bearer, unsigned, {"x-order-event": "e-7"}, {}, now=0) == DeliveryIdentity(
        "id:e-7", "e-7", True)


def test_a_configured_body_field_names_the_run() -> None:
    by_field = trigger(deliveryId={"field": "data.id"})
    assert delivery_identity(by_field, GITHUB, {}, {"data": {"id": 42}}, now=0) == DeliveryIdentity(
        "id:42", "42", True)


def test_a_missing_configured_delivery_id_is_a_400_naming_it() -> None:
    outcome = delivery_identity(trigger(deliveryId={"field": "data.id"}), GITHUB, {}, {"data": {}}, now=0)
    assert isinstance(outcome, Refusal) and outcome.status == 400 and "data.id" in outcome.message
    outcome = delivery_identity(standard(deliveryId={"header": "X-Event"}), STANDARD, {}, {}, now=0)
    assert isinstance(outcome, Refusal) and outcome.status == 400 and "X-Event" in outcome.message


def test_hmac_deliveries_are_named_by_the_signed_timestamp_and_body() -> None:
    hmac_trigger = WebhookTrigger.model_validate({"verify": {"scheme": "hmac", "secretRef": {"name": "h", "key": "s"}}})
    stamped = Verified(delivery_id=None, id_is_signed=False, timestamp=1000, signed_digest="ef" * 32)
    identity = delivery_identity(hmac_trigger, stamped, {}, {}, now=5000)
    assert identity == DeliveryIdentity("signed:" + "ef" * 32, None, False)


def test_without_anything_signed_the_content_within_the_window_names_the_run() -> None:
    bearer = WebhookTrigger.model_validate({"verify": {"scheme": "bearer", "secretRef": {"name": "h", "key": "t"}}})
    unnamed = Verified(delivery_id=None, id_is_signed=False, timestamp=None, signed_digest="cd" * 32)
    first = delivery_identity(bearer, unnamed, {}, {}, now=1000)
    assert first == delivery_identity(bearer, unnamed, {}, {}, now=1001)
    assert first != delivery_identity(bearer, unnamed, {}, {}, now=1000 + 300)


def test_run_names_are_dns_labels_and_differ_per_trigger_and_delivery() -> None:
    name = webhook_run_name("shop", "order-fulfilment", "order_paid", "id:1")
    assert re.fullmatch(r"order-fulfilment-order-paid-[0-9a-f]{16}", name)
    assert name == webhook_run_name("shop", "order-fulfilment", "order_paid", "id:1")
    assert name != webhook_run_name("shop", "order-fulfilment", "order_paid", "id:2")
    assert name != webhook_run_name("other", "order-fulfilment", "order_paid", "id:1")
    long = webhook_run_name("ns", "w" * 253, "t" * 63, "id:1")
    assert len(long) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", long)


def test_only_declared_fields_enter_trigger_data() -> None:
    mapped = trigger(data={"order": "body.order.id", "event": "headers['x-github-event']"})
    context = {"body": {"order": {"id": "A-1", "card": "4111..."}}, "headers": {"x-github-event": "release"}}
    assert trigger_data(mapped, context) == {"order": "A-1", "event": "release"}
    assert trigger_data(trigger(), context) == {}


def test_trigger_data_over_the_cap_is_refused() -> None:
    mapped = trigger(data={"all": "body"}, maxDataBytes=16)
    outcome = trigger_data(mapped, {"body": {"text": "x" * 100}, "headers": {}})
    assert isinstance(outcome, Refusal) and outcome.status == 422 and "maxDataBytes" in outcome.message


def test_a_mapping_that_fails_names_the_key() -> None:
    outcome = trigger_data(trigger(data={"order": "body.order.id"}), {"body": {}, "headers": {}})
    assert isinstance(outcome, Refusal) and outcome.status == 422 and "trigger.data.order" in outcome.message


def test_filter_drops_and_must_be_boolean() -> None:
    context = {"body": {"action": "created"}, "headers": {}}
    assert passes_filter(trigger(filter="body.action == 'published'"), context) is False
    assert passes_filter(trigger(filter="body.action == 'created'"), context) is True
    outcome = passes_filter(trigger(filter="body.action"), context)
    assert isinstance(outcome, Refusal) and outcome.status == 422


def test_credentials_in_headers_are_invisible_to_the_mapping() -> None:
    visible = visible_headers({"authorization": "Bearer t", "cookie": "c", "x-request-id": "r"})
    assert visible == {"x-request-id": "r"}


def test_bodies_parse_per_content_type() -> None:
    assert parse_body("application/json", b'{"a": 1}') == {"a": 1}
    assert parse_body("application/x-www-form-urlencoded", b"payload=%7B%7D&x=1") == {"payload": "{}", "x": "1"}
    assert parse_body("text/plain", b"hello") == "hello"
    assert isinstance(parse_body("application/json", b"{"), Refusal)
    assert isinstance(parse_body("application/json", b"\xff"), Refusal)


def test_rate_limit_allows_a_minute_of_burst_then_says_when_to_retry() -> None:
    limiter = RateLimiter()
    key = ("ns", "wf", "hook")
    assert limiter.take(key, 2, now=0) is None
    assert limiter.take(key, 2, now=0) is None
    wait = limiter.take(key, 2, now=0)
    assert wait is not None and 29 < wait <= 30
    assert limiter.take(key, 2, now=30) is None
    assert limiter.take(("ns", "wf", "other"), 2, now=0) is None
