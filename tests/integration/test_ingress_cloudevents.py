"""CloudEvents triggers at the real ingress against the real API server, sent by the reference SDK.

The sender no one here wrote is the CloudEvents SDK for Python: its `to_structured` and `to_binary`
make the request, httpx carries it over loopback to the ingress process, which creates runs as the
chart's ingress ServiceAccount. Each attack is made as whoever holds what the attacker would hold:
a captured request, a forged header, no key at all.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from cloudevents.v1.conversion import to_binary, to_structured
from cloudevents.v1.http import CloudEvent
from tests.integration.ingress_support import (
    create_secret,
    hook_url,
    ingress,
    new_whsec,
    opt_in,
    post,
    refusal,
    runs,
    wait_until_cached,
)
from tests.integration.support import apply, get

from towline.triggers.ingress import sign
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

PAID = "com.example.order.paid"
SOURCE = "/shop/orders"
TOKEN = "ce-bearer-token-of-32-bytes-len!"
Mode = Callable[[CloudEvent], tuple[dict[str, str], bytes]]


def _workflow(namespace: str, cloud_event: dict[str, Any], name: str = "orders") -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": name, "namespace": namespace},
        "spec": {"triggers": [{"name": "paid", "cloudEvent": cloud_event}],
                 "steps": [{"id": "noop", "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}}]},
    }


@pytest.fixture
def shop(towline_installed: ControlPlane, ingress: IngressProcess, namespace: str) -> tuple[str, str]:
    """A Workflow whose cloudEvent trigger takes order.paid events from /shop/orders, Standard-Webhooks signed."""
    secret = new_whsec()
    create_secret(towline_installed, namespace, "shop-events", {"signing-secret": secret})
    opt_in(towline_installed, namespace, "shop-events")
    apply(towline_installed, _workflow(namespace, {
        "verify": {"scheme": "standard-webhooks", "secretRef": {"name": "shop-events", "key": "signing-secret"}},
        "types": [PAID], "sources": [SOURCE], "maxBodyBytes": 4096, "rateLimitPerMinute": 1000,
        "filter": "!has(event.data.test) || !event.data.test",
        "data": {"order_id": "event.data.order.id", "subject": "event.subject"},
    }))
    wait_until_cached(ingress, namespace, "orders", "paid")
    return hook_url(ingress, namespace, "orders", "paid"), secret


def _event(event_id: str, *, data: Any = None, **attributes: str) -> CloudEvent:
    return CloudEvent({"type": PAID, "source": SOURCE, "id": event_id, "subject": "A-1001", **attributes},
                      {"order": {"id": "A-1001"}} if data is None else data)


def _signed(secret: str, mode: Mode, event: CloudEvent, *, at: float | None = None) -> tuple[dict[str, str], bytes]:
    headers, body = mode(event)
    stamp = int(time.time() if at is None else at)
    message_id = "msg-" + hashlib.sha256(str(event["id"]).encode()).hexdigest()[:16]
    return {**headers, **sign.cloud_event_standard_headers(secret, message_id, stamp, headers, body)}, body


def _send(url: str, headers: dict[str, str], body: bytes) -> httpx.Response:
    return post(url, body, headers)


@pytest.mark.parametrize("mode", [to_structured, to_binary], ids=["structured", "binary"])
def test_an_sdk_event_starts_exactly_one_run_with_the_mapped_data(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str], mode: Mode
) -> None:
    url, secret = shop
    response = _send(url, *_signed(secret, mode, _event("evt-1")))
    assert response.status_code == 202, response.text
    name = refusal(response)["run"]
    run = get(towline_installed, "workflowruns.towline.dev", name, namespace)
    assert run is not None
    assert run["spec"]["trigger"] == {"type": "webhook", "name": "paid", "deliveryId": "evt-1",
                                      "data": {"order_id": "A-1001", "subject": "A-1001"}}
    assert [r["metadata"]["name"] for r in runs(towline_installed, namespace)] == [name]


def test_a_repeated_id_and_source_starts_no_second_run_in_either_mode(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, secret = shop
    first = _send(url, *_signed(secret, to_structured, _event("evt-again")))
    assert first.status_code == 202, first.text
    # The same event again, signed anew (a sender's retry), and the same event in the other mode.
    for mode in (to_structured, to_binary):
        again = _send(url, *_signed(secret, mode, _event("evt-again")))
        assert again.status_code == 200, again.text
        assert refusal(again)["run"] == refusal(first)["run"]
    other_source = _send(url, *_signed(secret, to_structured, _event("evt-again", source="/shop/refunds")))
    assert other_source.status_code == 202 and "not one of this trigger's sources" in refusal(other_source)["message"]
    assert len(runs(towline_installed, namespace)) == 1


def test_an_unauthenticated_event_gets_401_and_no_run(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, _ = shop
    for mode in (to_structured, to_binary):
        headers, body = mode(_event("evt-unsigned"))
        response = _send(url, headers, body)
        assert response.status_code == 401, response.text
        assert "webhook-" in refusal(response)["message"]
    assert runs(towline_installed, namespace) == []


def test_a_type_or_source_the_trigger_does_not_list_starts_nothing_and_says_so(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, secret = shop
    prefixed = _send(url, *_signed(secret, to_binary, _event("evt-t", type=PAID + ".v2")))
    assert prefixed.status_code == 202, prefixed.text
    assert refusal(prefixed)["message"].startswith("ignored: type 'com.example.order.paid.v2' is not one of")
    elsewhere = _send(url, *_signed(secret, to_structured, _event("evt-s", source="/shop")))
    assert elsewhere.status_code == 202 and refusal(elsewhere)["run"] is None
    assert "source '/shop' is not one of this trigger's sources" in refusal(elsewhere)["message"]
    filtered = _send(url, *_signed(secret, to_structured, _event("evt-f", data={"test": True})))
    assert filtered.status_code == 202 and refusal(filtered)["message"].startswith("filtered")
    assert runs(towline_installed, namespace) == []


def test_a_forged_binary_header_fails_the_signature(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    """Whoever captured one signed binary-mode event changes its ce-id (a new run) or ce-subject (other data)."""
    url, secret = shop
    headers, body = _signed(secret, to_binary, _event("evt-captured"))
    for header, value in (("ce-id", "evt-forged"), ("ce-subject", "B-666"), ("ce-extra", "1")):
        response = _send(url, {**headers, header: value}, body)
        assert response.status_code == 401, (header, response.text)
    assert runs(towline_installed, namespace) == []


def test_a_replayed_event_starts_nothing_within_the_window_and_is_refused_after_it(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, secret = shop
    captured = _signed(secret, to_binary, _event("evt-replay"))
    assert _send(url, *captured).status_code == 202
    replay = _send(url, *captured)
    assert replay.status_code == 200 and refusal(replay)["message"].startswith("redelivery")
    stale = _send(url, *_signed(secret, to_structured, _event("evt-old"), at=time.time() - 3600))
    assert stale.status_code == 401 and "old" in refusal(stale)["message"]
    assert len(runs(towline_installed, namespace)) == 1


def test_an_oversized_event_is_refused_before_it_is_read(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, secret = shop
    response = _send(url, *_signed(secret, to_structured, _event("evt-big", data={"pad": "x" * 8192})))
    assert response.status_code == 413 and refusal(response)["reason"] == "BodyTooLarge"
    assert runs(towline_installed, namespace) == []


def test_a_filter_that_tries_to_run_long_is_refused_by_its_cost_bound(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    apply(towline_installed, _workflow(namespace, {
        "verify": {"scheme": "bearer", "secretRef": {"name": "ce-token", "key": "token"}}, "types": [PAID],
        "maxBodyBytes": 1_048_576,
        "filter": "event.data.items.all(x, event.data.items.all(y, event.data.items.all(z, x + y + z >= 0)))",
    }, name="slow"))
    create_secret(towline_installed, namespace, "ce-token", {"token": TOKEN})
    opt_in(towline_installed, namespace, "ce-token")
    wait_until_cached(ingress, namespace, "slow", "paid")
    headers, body = to_structured(_event("evt-slow", data={"items": list(range(20_000))}))
    response = _send(hook_url(ingress, namespace, "slow", "paid"), {**headers, **sign.bearer_headers(TOKEN)}, body)
    assert response.status_code == 422, response.text
    assert "too expensive to evaluate" in refusal(response)["message"]
    wrong = _send(hook_url(ingress, namespace, "slow", "paid"), {**headers, **sign.bearer_headers(TOKEN[::-1])}, body)
    assert wrong.status_code == 401
    assert runs(towline_installed, namespace) == []


def test_a_hostile_event_id_still_names_a_valid_bounded_run(
    towline_installed: ControlPlane, namespace: str, shop: tuple[str, str]
) -> None:
    url, secret = shop
    hostile = "../../" + "Ä\u202e;$(rm -rf /)" + "x" * 230
    response = _send(url, *_signed(secret, to_structured, _event(hostile)))
    assert response.status_code == 202, response.text
    name = refusal(response)["run"]
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    run = get(towline_installed, "workflowruns.towline.dev", name, namespace)
    assert run is not None and run["spec"]["trigger"]["deliveryId"] == hostile
    too_long = _send(url, *_signed(secret, to_structured, _event("y" * 257)))
    assert too_long.status_code == 400 and "attribute id is 257 characters" in refusal(too_long)["message"]
