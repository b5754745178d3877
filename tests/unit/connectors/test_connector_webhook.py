"""webhook.send: Standard Webhooks signing, against a loopback receiver."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from connector_testkit import LoopbackHTTPServer, RecordedRequest, Reply, make_ctx, output_of, run_action
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.registry import validate_inputs
from towline_connectors.webhook import webhook_id_for

KEY_BYTES = bytes(range(32))
SECRET = "whsec_" + base64.b64encode(KEY_BYTES).decode()
NOW = 1_767_225_600  # 2026-01-01T00:00:00Z


def _ctx(secret: str = SECRET, key: str = "renewal-watch-run-7-notify-1") -> ActionContext:
    return make_ctx(credentials={"webhook": {"signing-secret": secret}}, idempotency_key=key, clock=lambda: NOW)


def _expected_v1(request: RecordedRequest, key: bytes = KEY_BYTES) -> str:
    signed = f"{request.headers['webhook-id']}.{request.headers['webhook-timestamp']}.".encode() + request.body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def test_webhook_carries_id_timestamp_and_a_verifiable_signature(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/hook"] = Reply(204)
    result = run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {"a": 1}}, _ctx())
    request = http_server.requests[0]
    assert request.headers["webhook-id"] == "renewal-watch-run-7-notify-1"
    assert request.headers["webhook-timestamp"] == str(NOW)
    assert request.headers["webhook-signature"] == _expected_v1(request)
    assert request.body == b'{"a":1}'
    assert output_of(result) == {"status": 204, "webhookId": "renewal-watch-run-7-notify-1", "timestamp": NOW}


def test_webhook_sends_the_idempotency_key_header(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/hook"] = Reply(200)
    run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {}}, _ctx())
    assert http_server.requests[0].headers["idempotency-key"] == "renewal-watch-run-7-notify-1"


def test_event_type_wraps_the_payload_in_the_spec_envelope(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/hook"] = Reply(200)
    run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {"id": 5}, "type": "task.created"}, _ctx())
    assert http_server.requests[0].json() == {
        "type": "task.created",
        "timestamp": "2026-01-01T00:00:00Z",
        "data": {"id": 5},
    }


def test_ed25519_key_signs_with_v1a(http_server: LoopbackHTTPServer) -> None:
    private = Ed25519PrivateKey.generate()
    seed = private.private_bytes_raw()
    http_server.routes["/hook"] = Reply(200)
    ctx = _ctx(secret="whsk_" + base64.b64encode(seed).decode())
    run_action("webhook.send", {"url": http_server.url("/hook"), "payload": [1]}, ctx)
    request = http_server.requests[0]
    scheme, _, signature = request.headers["webhook-signature"].partition(",")
    signed = f"{request.headers['webhook-id']}.{request.headers['webhook-timestamp']}.".encode() + request.body
    assert scheme == "v1a"
    private.public_key().verify(base64.b64decode(signature), signed)  # raises if invalid


def test_rotating_secrets_sign_with_each(http_server: LoopbackHTTPServer) -> None:
    old_key = b"o" * 24
    http_server.routes["/hook"] = Reply(200)
    secrets = f"{SECRET} whsec_{base64.b64encode(old_key).decode()}"
    run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {}}, _ctx(secret=secrets))
    request = http_server.requests[0]
    assert request.headers["webhook-signature"].split(" ") == [_expected_v1(request), _expected_v1(request, old_key)]


def test_key_with_a_dot_becomes_a_stable_hashed_id() -> None:
    first = webhook_id_for("team.renewals/run-1/notify")
    assert first == webhook_id_for("team.renewals/run-1/notify")
    assert first.startswith("msg_")
    assert "." not in first


def test_redirect_is_a_permanent_failure_and_is_not_followed(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/hook"] = Reply(308, headers={"Location": "/elsewhere"})
    with pytest.raises(ActionError, match="update the URL") as caught:
        run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {}}, _ctx())
    assert caught.value.error_class is ErrorClass.PERMANENT
    assert [r.path for r in http_server.requests] == ["/hook"]


def test_gone_receiver_is_a_permanent_failure(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/hook"] = Reply(410)
    with pytest.raises(ActionError, match="410 Gone") as caught:
        run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {}}, _ctx())
    assert caught.value.error_class is ErrorClass.PERMANENT


def test_receiver_errors_are_transient(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/hook"] = Reply(502)
    with pytest.raises(ActionError) as caught:
        run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {}}, _ctx())
    assert caught.value.error_class is ErrorClass.TRANSIENT


def test_a_secret_that_is_not_base64_is_an_auth_error(http_server: LoopbackHTTPServer) -> None:
    with pytest.raises(ActionError, match="not a Standard Webhooks secret") as caught:
        run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {}}, _ctx(secret="whsec_!!!"))
    assert caught.value.error_class is ErrorClass.AUTH
    assert http_server.requests == []


def test_payload_is_signed_exactly_as_sent(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/hook"] = Reply(200)
    payload = {"name": "Zoë", "nested": {"b": [1, 2.5, None]}}
    run_action("webhook.send", {"url": http_server.url("/hook"), "payload": payload}, _ctx())
    request = http_server.requests[0]
    assert json.loads(request.body) == payload
    assert request.headers["webhook-signature"] == _expected_v1(request)


def test_signed_headers_cannot_be_overridden_by_the_step() -> None:
    problems = validate_inputs(
        "webhook.send", {"url": "https://x.example.com", "payload": {}, "headers": {"Webhook-Id": "1"}}
    )
    assert problems == ["with.headers: header 'Webhook-Id' is set by webhook.send; remove it"]
