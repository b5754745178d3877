"""Accepted deliveries: exactly one run per delivery (also when redeliveries race), what enters it, health."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tests.integration.ingress_support import (
    create_secret,
    hook_url,
    ingress,
    new_whsec,
    opt_in,
    post,
    refusal,
    runs,
    signed_standard,
    standard_webhook,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.support import apply, bind_role, create, get

from towline.triggers.ingress import sign
from towline.triggers.ingress.runname import webhook_run_name
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import INGRESS_SERVICE_ACCOUNT, IngressProcess
from towline_dev.install import OPERATOR_NAMESPACE

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

INGRESS_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{INGRESS_SERVICE_ACCOUNT}"
BODY = b'{"type": "order.paid", "data": {"id": "A-1001", "total": 12.5, "card": "4111-1111"}}'

HMAC_KEY = "hmac-secret-of-32-bytes-length"
TOKEN = "bearer-token-of-32-bytes-length"


@pytest.fixture
def shop(towline_installed: ControlPlane, ingress: IngressProcess, namespace: str) -> tuple[str, str]:
    secret = new_whsec()
    create_secret(towline_installed, namespace, "shop-webhook", {"signing-secret": secret})
    opt_in(towline_installed, namespace, "shop-webhook")
    webhook = standard_webhook("shop-webhook", rateLimitPerMinute=1000,
                               data={"order_id": "body.data.id", "total": "body.data.total"},
                               filter="body.type == 'order.paid'")
    apply(towline_installed, webhook_workflow("orders", namespace, webhook, trigger="order_paid"))
    wait_until_cached(ingress, namespace, "orders", "order_paid")
    return hook_url(ingress, namespace, "orders", "order_paid"), secret


def test_a_signed_delivery_creates_one_webhook_run_with_only_the_mapped_data(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, secret = shop
    response = post(url, BODY, signed_standard(secret, BODY, delivery_id="msg_1"))
    assert response.status_code == 202, response.text
    name = refusal(response)["run"]
    run = get(towline_installed, "workflowruns.towline.dev", name, namespace)
    assert run is not None
    assert run["spec"]["trigger"] == {"type": "webhook", "name": "order_paid", "deliveryId": "msg_1",
                                      "data": {"order_id": "A-1001", "total": 12.5}}
    assert run["spec"]["requestedBy"] == INGRESS_USER
    assert run["metadata"]["ownerReferences"][0]["name"] == "orders"
    # The unmapped card number is nowhere in the run. Not "4111" alone: a version 4 UUID's third group starts
    # with 4, so one in 4,096 uids read "4111" (a CI run met one); "4111-1111" cannot be one (its fourth group
    # starts with 8, 9, a or b).
    assert "4111-1111" not in json.dumps(run)


def test_a_redelivered_event_answers_with_the_existing_run(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, secret = shop
    first = post(url, BODY, signed_standard(secret, BODY, delivery_id="msg_again"))
    again = post(url, BODY, signed_standard(secret, BODY, delivery_id="msg_again"))
    assert (first.status_code, again.status_code) == (202, 200)
    assert refusal(first)["run"] == refusal(again)["run"]
    assert "redelivery" in refusal(again)["message"]
    assert len(runs(towline_installed, namespace)) == 1


def test_racing_redeliveries_create_exactly_one_run(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, secret = shop
    headers = signed_standard(secret, BODY, delivery_id="msg_race")

    async def race() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            return list(await asyncio.gather(*(client.post(url, content=BODY, headers=headers) for _ in range(12))))

    responses = asyncio.run(race())
    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(202) == 1 and statuses.count(200) == 11, [r.text for r in responses]
    assert len({refusal(r)["run"] for r in responses}) == 1
    assert len(runs(towline_installed, namespace)) == 1


def test_distinct_deliveries_get_distinct_runs(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, secret = shop
    names = {refusal(post(url, BODY, signed_standard(secret, BODY)))["run"] for _ in range(3)}
    assert len(names) == 3
    assert len(runs(towline_installed, namespace)) == 3


def test_a_run_name_squatted_by_a_runner_is_not_adopted(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str, shop: tuple[str, str]
) -> None:
    """carol pre-creates a manual run under the name the next delivery will get; the ingress refuses to adopt it."""
    url, secret = shop
    bind_role(towline_installed, namespace, "towline-runner", users=("carol",))
    # Delivery ids are often guessable (order numbers); the name is then too.
    name = webhook_run_name(namespace, "orders", "order_paid", "id:msg_next")
    create(towline_installed, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"workflowRef": {"name": "orders"}, "requestedBy": "carol"},
    }, user="carol")
    response = post(url, BODY, signed_standard(secret, BODY, delivery_id="msg_next"))
    assert response.status_code == 409, response.text
    assert refusal(response)["reason"] == "NameTaken"
    squatted = get(towline_installed, "workflowruns.towline.dev", name, namespace)
    assert squatted is not None and squatted["spec"]["requestedBy"] == "carol"
    assert squatted["spec"].get("trigger", {}).get("type", "manual") == "manual"


def test_the_ingress_identity_may_not_read_or_write_anything_else(towline_installed: ControlPlane) -> None:
    for verb, resource in (("create", "jobs"), ("delete", "workflowruns.towline.dev"),
                           ("update", "workflowruns.towline.dev/status"), ("list", "secrets"),
                           ("create", "approvals.towline.dev"), ("update", "workflows.towline.dev")):
        can = towline_installed.kubectl("auth", "can-i", verb, resource, "-A", "--as", INGRESS_USER, check=False)
        assert can.stdout.strip() == "no", (verb, resource)


def test_health_readiness_and_metrics(ingress: IngressProcess, shop: tuple[str, str]) -> None:
    assert httpx.get(f"{ingress.admin_url}/healthz").status_code == 200
    ready = httpx.get(f"{ingress.admin_url}/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    url, secret = shop
    post(url, BODY, signed_standard(secret, BODY, delivery_id=f"msg_{secrets.token_hex(4)}"))
    metrics = httpx.get(f"{ingress.admin_url}/metrics").text
    assert 'towline_webhook_deliveries_total{reason="Accepted",status="202"}' in metrics
    assert "towline_webhook_request_seconds_bucket" in metrics


def test_an_ed25519_standard_webhooks_trigger_verifies_with_the_public_key_from_its_secret(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    create_secret(towline_installed, namespace, "sender-key", {"public": "whpk_" + base64.b64encode(public).decode()})
    opt_in(towline_installed, namespace, "sender-key")
    apply(towline_installed, webhook_workflow("signed-by-key", namespace, {"verify": {
        "scheme": "standard-webhooks", "publicKeyRef": {"name": "sender-key", "key": "public"}}}))
    wait_until_cached(ingress, namespace, "signed-by-key")
    url = hook_url(ingress, namespace, "signed-by-key")
    headers = {"Content-Type": "application/json",
               **sign.standard_webhooks_ed25519_headers(private, "msg_ed", int(time.time()), BODY)}
    assert post(url, BODY, headers).status_code == 202
    forged = {"Content-Type": "application/json", **sign.standard_webhooks_ed25519_headers(
        Ed25519PrivateKey.generate(), "msg_forged", int(time.time()), BODY)}
    response = post(url, BODY, forged)
    assert response.status_code == 401, response.text
    assert len(runs(towline_installed, namespace)) == 1


def test_hmac_and_bearer_triggers_over_http(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    create_secret(towline_installed, namespace, "generic", {"secret": HMAC_KEY, "token": TOKEN})
    opt_in(towline_installed, namespace, "generic")
    apply(towline_installed, webhook_workflow("generic", namespace, {
        "verify": {"scheme": "hmac", "secretRef": {"name": "generic", "key": "secret"},
                   "signatureHeader": "X-Shop-Signature", "timestampHeader": "X-Shop-Time"},
        "deliveryId": {"field": "data.id"}}))
    apply(towline_installed, webhook_workflow("token", namespace, {
        "verify": {"scheme": "bearer", "secretRef": {"name": "generic", "key": "token"}}}))
    wait_until_cached(ingress, namespace, "generic")
    wait_until_cached(ingress, namespace, "token")
    signed = sign.hmac_headers(HMAC_KEY.encode(), int(time.time()), BODY, signature_header="X-Shop-Signature",
                               timestamp_header="X-Shop-Time")
    first = post(hook_url(ingress, namespace, "generic"), BODY, {"Content-Type": "application/json", **signed})
    assert first.status_code == 202, first.text
    resigned = sign.hmac_headers(HMAC_KEY.encode(), int(time.time()) + 1, BODY, signature_header="X-Shop-Signature",
                                 timestamp_header="X-Shop-Time")
    again = post(hook_url(ingress, namespace, "generic"), BODY, {"Content-Type": "application/json", **resigned})
    assert again.status_code == 200, again.text  # same data.id: the same delivery, signed anew
    token_url = hook_url(ingress, namespace, "token")
    assert post(token_url, BODY, {"Content-Type": "application/json", "Authorization": "Bearer nope"}
                ).status_code == 401
    accepted = post(token_url, BODY, {"Content-Type": "application/json", **sign.bearer_headers(TOKEN)})
    assert accepted.status_code == 202, accepted.text
    assert len(runs(towline_installed, namespace)) == 2
