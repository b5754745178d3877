"""GitLab, Slack, Stripe and Shopify senders through the real ingress: a valid delivery creates one run,
its redelivery finds that run, and a tampered, wrongly keyed, stale or unsigned one answers 401 and creates none.

The valid delivery is sent with `towline webhook send`, as a user trying a
trigger would; the variants are signed with the same helpers (`sign`).
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import httpx
import pytest
from tests.integration.ingress_support import (
    create_secret,
    hook_url,
    ingress,
    opt_in,
    post,
    refusal,
    runs,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.support import apply

from towline.triggers.ingress import sign
from towline.triggers.ingress.send import send_main
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

JSON = {"Content-Type": "application/json"}


def provider_trigger(cluster: ControlPlane, ingress: IngressProcess, namespace: str, scheme: str,
                     secret: str, **webhook: object) -> str:
    """A Workflow `hook-<scheme>` whose trigger checks `scheme` with a granted Secret holding `secret`; its URL."""
    name = f"hook-{scheme}"
    create_secret(cluster, namespace, f"{scheme}-key", {"secret": secret})
    opt_in(cluster, namespace, f"{scheme}-key")
    apply(cluster, webhook_workflow(name, namespace, {
        "verify": {"scheme": scheme, "secretRef": {"name": f"{scheme}-key", "key": "secret"}},
        "rateLimitPerMinute": 1000, **webhook}))
    wait_until_cached(ingress, namespace, name)
    return hook_url(ingress, namespace, name)


def send_with_cli(url: str, scheme: str, secret: str, body: bytes, tmp_path: Path, *extra: str) -> None:
    secret_file = tmp_path / f"{scheme}.secret"
    secret_file.write_text(secret)
    data = tmp_path / f"{scheme}.body"
    data.write_bytes(body)
    assert send_main([url, "--scheme", scheme, "--secret-file", str(secret_file), "--data", f"@{data}", *extra]) == 0


def assert_unauthorized(cluster: ControlPlane, namespace: str, response: httpx.Response, words: str,
                        runs_before: int = 1) -> None:
    assert response.status_code == 401, response.text
    body = refusal(response)
    assert body["reason"] == "Unauthorized" and words in body["message"], body
    assert len(runs(cluster, namespace)) == runs_before, "a refused delivery created a run"


def one_webhook_run(cluster: ControlPlane, namespace: str, trigger_name: str = "hook") -> dict[str, object]:
    (run,) = runs(cluster, namespace)
    trigger = run["spec"]["trigger"]
    assert trigger["type"] == "webhook" and trigger["name"] == trigger_name, trigger
    return dict(trigger)


def test_gitlab_token_deliveries(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str, tmp_path: Path
) -> None:
    token = secrets.token_hex(16)
    url = provider_trigger(towline_installed, ingress, namespace, "gitlab", token)
    push = b'{"object_kind": "push", "ref": "refs/heads/main", "after": "4b825dc6"}'
    assert_unauthorized(towline_installed, namespace, post(url, push, JSON), "missing X-Gitlab-Token", 0)
    assert_unauthorized(towline_installed, namespace, post(
        url, push, {**JSON, **sign.gitlab_headers(secrets.token_hex(16), "idem-x")}), "does not match", 0)

    send_with_cli(url, "gitlab", token, push, tmp_path, "--id", "idem-1")
    assert one_webhook_run(towline_installed, namespace)["deliveryId"] == "idem-1"
    resend = post(url, push, {**JSON, **sign.gitlab_headers(token, "idem-1")})
    assert resend.status_code == 200, resend.text  # GitLab's "Resend request" keeps the Idempotency-Key
    assert len(runs(towline_installed, namespace)) == 1
    assert token not in ingress.log_text()


def test_slack_signed_deliveries(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str, tmp_path: Path
) -> None:
    secret = secrets.token_hex(16)
    url = provider_trigger(towline_installed, ingress, namespace, "slack", secret,
                           contentTypes=["application/json", "application/x-www-form-urlencoded"])
    event = json.dumps({"type": "event_callback", "event_id": "Ev0PV52K25",
                        "event": {"type": "app_mention", "text": "deploy"}}).encode()
    now = int(time.time())
    assert_unauthorized(towline_installed, namespace, post(url, event, JSON), "missing X-Slack-Signature", 0)
    signed = sign.slack_headers(secret.encode(), now, event)
    assert_unauthorized(towline_installed, namespace, post(url, event.replace(b"deploy", b"destroy"),
                                                           {**JSON, **signed}), "does not match", 0)
    assert_unauthorized(towline_installed, namespace, post(
        url, event, {**JSON, **sign.slack_headers(secrets.token_bytes(16), now, event)}), "does not match", 0)
    stale = sign.slack_headers(secret.encode(), now - 301, event)
    assert_unauthorized(towline_installed, namespace, post(url, event, {**JSON, **stale}), "s old", 0)

    handshake = json.dumps({"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "type": "url_verification",
                            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}).encode()
    answer = post(url, handshake, {**JSON, **sign.slack_headers(secret.encode(), now, handshake)})
    assert answer.status_code == 200, answer.text  # saving an Events API Request URL in Slack
    assert answer.json()["challenge"] == "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    forged = post(url, handshake, {**JSON, **sign.slack_headers(secrets.token_bytes(16), now, handshake)})
    assert_unauthorized(towline_installed, namespace, forged, "does not match", 0)

    send_with_cli(url, "slack", secret, event, tmp_path)
    assert one_webhook_run(towline_installed, namespace)["deliveryId"] == "Ev0PV52K25"
    retry = post(url, event, {**JSON, **sign.slack_headers(secret.encode(), now + 2, event)})
    assert retry.status_code == 200, retry.text  # Slack retries an event signed anew, with the same event_id
    command = b"command=%2Fdeploy&text=checkout&trigger_id=398738663015.47445629121.803a0bc8"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    answer = post(url, command, {**form, **sign.slack_headers(secret.encode(), now, command)})
    assert answer.status_code == 202, answer.text
    assert len(runs(towline_installed, namespace)) == 2
    assert secret not in ingress.log_text()


def test_stripe_signed_deliveries(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str, tmp_path: Path
) -> None:
    secret = "whsec_" + secrets.token_urlsafe(24)
    url = provider_trigger(towline_installed, ingress, namespace, "stripe", secret,
                           data={"event_type": "body.type"})
    event = json.dumps({"id": "evt_1NG8Du2eZvKYlo2CUI79vXWy", "object": "event", "type": "charge.succeeded",
                        "data": {"object": {"id": "ch_3"}}}).encode()
    now = int(time.time())
    key = secret.encode()
    assert_unauthorized(towline_installed, namespace, post(url, event, JSON), "missing Stripe-Signature", 0)
    tampered = event.replace(b"ch_3", b"ch_4")
    assert_unauthorized(towline_installed, namespace, post(
        url, tampered, {**JSON, **sign.stripe_headers([key], now, event)}), "none of the 1 v1", 0)
    assert_unauthorized(towline_installed, namespace, post(
        url, event, {**JSON, **sign.stripe_headers([b"whsec_" + secrets.token_bytes(8).hex().encode()], now, event)}),
        "none of the 1 v1", 0)
    stale = sign.stripe_headers([key], now - 301, event)
    assert_unauthorized(towline_installed, namespace, post(url, event, {**JSON, **stale}), "s old", 0)

    send_with_cli(url, "stripe", secret, event, tmp_path)
    trigger = one_webhook_run(towline_installed, namespace)
    assert trigger["deliveryId"] == "evt_1NG8Du2eZvKYlo2CUI79vXWy"
    assert trigger["data"] == {"event_type": "charge.succeeded"}
    rotating = sign.stripe_headers([b"whsec_retired-endpoint-secret", key], now + 3, event)
    retry = post(url, event, {**JSON, **rotating})
    assert retry.status_code == 200, retry.text  # a retry, re-signed during a rotation: the same event id
    assert len(runs(towline_installed, namespace)) == 1
    assert secret not in ingress.log_text()


def test_shopify_signed_deliveries(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str, tmp_path: Path
) -> None:
    secret = secrets.token_hex(16)
    url = provider_trigger(towline_installed, ingress, namespace, "shopify", secret)
    order = json.dumps({"id": 820982911946154508, "email": "jon@doe.ca", "total_price": "12.50"}).encode()
    key = secret.encode()

    def signing(body: bytes, hook_id: str) -> dict[str, str]:
        return {**JSON, **sign.shopify_headers(key, body, hook_id)}

    assert_unauthorized(towline_installed, namespace, post(url, order, {**JSON, "X-Shopify-Webhook-Id": "w-0"}),
                        "missing X-Shopify-Hmac-Sha256", 0)
    assert_unauthorized(towline_installed, namespace, post(url, order.replace(b"12.50", b"0.01"),
                                                           signing(order, "w-1")), "does not match", 0)
    assert_unauthorized(towline_installed, namespace, post(
        url, order, {**JSON, **sign.shopify_headers(secrets.token_bytes(16), order, "w-1")}), "does not match", 0)

    send_with_cli(url, "shopify", secret, order, tmp_path, "--id", "w-1")
    assert one_webhook_run(towline_installed, namespace)["deliveryId"] == "w-1"
    replay = post(url, order, signing(order, "w-forged"))
    assert replay.status_code == 200, replay.text  # the body names the delivery, not the unsigned webhook id
    assert one_webhook_run(towline_installed, namespace)["deliveryId"] == "w-1"
    assert secret not in ingress.log_text()
