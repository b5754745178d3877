"""Property: verification never raises and never accepts a delivery it did not see validly signed."""

from __future__ import annotations

import base64
import itertools
import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from towline.api.webhooks import WebhookTrigger, WebhookVerification
from towline.triggers.ingress import sign
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.payload import parse_body, passes_filter, trigger_data, visible_headers
from towline.triggers.ingress.runname import delivery_identity
from towline.triggers.ingress.verify import Verified, body_mac, decode_keys, precheck, verify_delivery

SECRET = "whsec_" + base64.b64encode(b"k" * 24).decode()
PLAIN_SECRET = b"plain-secret-of-32-bytes-length"
NOW = 1_800_000_000.0
HEADER_TEXT = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=120)
NAMES = ["webhook-id", "webhook-timestamp", "webhook-signature", "x-hub-signature-256", "x-hub-signature",
         "x-signature", "x-timestamp", "authorization", "x-github-delivery", "x-gitlab-token", "idempotency-key",
         "x-slack-signature", "x-slack-request-timestamp", "stripe-signature", "x-shopify-hmac-sha256",
         "shopify-hmac-sha256"]


def signature_like() -> st.SearchStrategy[str]:
    b64 = st.binary(min_size=0, max_size=80).map(lambda b: base64.b64encode(b).decode())
    entry = st.tuples(st.sampled_from(["v1", "v1a", "v2", ""]), b64).map(lambda t: f"{t[0]},{t[1]}")
    return st.one_of(HEADER_TEXT, st.lists(entry, max_size=12).map(" ".join))


HEADERS = st.dictionaries(st.sampled_from(NAMES), st.one_of(HEADER_TEXT, signature_like(),
                                                             st.integers(0, 2 * 10**9).map(str)), max_size=9)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheme=st.sampled_from(["github", "standard-webhooks", "hmac", "bearer", "gitlab", "slack", "stripe",
                               "shopify"]), headers=HEADERS,
       body=st.binary(max_size=256))
def test_random_deliveries_are_refused_with_a_4xx(scheme: str, headers: dict[str, str], body: bytes) -> None:
    verify = WebhookVerification.model_validate({"scheme": scheme, "secretRef": {"name": "s", "key": "k"}})
    keys = decode_keys(scheme, SECRET.encode() if scheme == "standard-webhooks" else PLAIN_SECRET, None)
    outcome = verify_delivery(verify, keys, headers, body, now=NOW)
    assert isinstance(outcome, Refusal)
    assert 400 <= outcome.status < 500
    early = precheck(verify, keys, headers, now=NOW)
    assert early is None or early.status == 401


@settings(max_examples=300, deadline=None)
@given(scheme=st.sampled_from(["github", "standard-webhooks", "hmac", "slack", "stripe", "shopify"]),
       body=st.binary(max_size=512),
       cuts=st.lists(st.integers(0, 512), max_size=6), forged=st.booleans())
def test_a_mac_fed_while_the_body_streams_decides_as_the_whole_body_does(
    scheme: str, body: bytes, cuts: list[int], forged: bool
) -> None:
    verify = WebhookVerification.model_validate({"scheme": scheme, "secretRef": {"name": "s", "key": "k"}})
    raw_secret = SECRET if scheme == "standard-webhooks" else PLAIN_SECRET.decode()
    keys = decode_keys(scheme, raw_secret.encode(), None)
    signed_body = body + b"!" if forged else body
    headers = {k.lower(): v for k, v in {
        "github": lambda: sign.github_headers(raw_secret.encode(), signed_body),
        "standard-webhooks": lambda: sign.standard_webhooks_headers(raw_secret, "msg_1", int(NOW), signed_body),
        "hmac": lambda: sign.hmac_headers(raw_secret.encode(), int(NOW), signed_body),
        "slack": lambda: sign.slack_headers(raw_secret.encode(), int(NOW), signed_body),
        "stripe": lambda: sign.stripe_headers([raw_secret.encode()], int(NOW), signed_body),
        "shopify": lambda: sign.shopify_headers(raw_secret.encode(), signed_body),
    }[scheme]().items()}
    assert precheck(verify, keys, headers, now=NOW) is None
    mac = body_mac(verify, keys, headers, now=NOW)
    assert mac is not None
    edges = [0, *sorted(cuts), len(body)]
    for start, end in itertools.pairwise(edges):
        mac.update(body[start:max(start, end)])
    streamed = verify_delivery(verify, keys, headers, body, now=NOW, mac=mac)
    whole = verify_delivery(verify, keys, headers, body, now=NOW)
    assert isinstance(streamed, Refusal) == isinstance(whole, Refusal) == forged


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=256), flip=st.integers(0, 255), delivery=st.text(string.ascii_letters, min_size=1,
                                                                                 max_size=20))
def test_any_change_to_a_signed_body_is_refused(body: bytes, flip: int, delivery: str) -> None:
    verify = WebhookVerification.model_validate({"scheme": "standard-webhooks", "secretRef": {"name": "s", "key": "k"}})
    keys = decode_keys("standard-webhooks", SECRET.encode(), None)
    headers = sign.standard_webhooks_headers(SECRET, delivery, int(NOW), body)
    assert not isinstance(verify_delivery(verify, keys, headers, body, now=NOW), Refusal)
    tampered = body + b"x" if not body else bytes([body[0] ^ (flip or 1)]) + body[1:]
    assert isinstance(verify_delivery(verify, keys, headers, tampered, now=NOW), Refusal)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["application/json", "application/x-www-form-urlencoded", "text/plain"]),
       raw=st.one_of(st.binary(max_size=200), JSON_VALUES.map(lambda v: json.dumps(v).encode())),
       headers=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=4))
def test_parsing_and_mapping_any_body_answers_a_value_or_a_4xx(kind: str, raw: bytes, headers: dict[str, str]) -> None:
    trigger = WebhookTrigger.model_validate({
        "verify": {"scheme": "github", "secretRef": {"name": "s", "key": "k"}},
        "filter": "has(body.a) ? body.a != 'skip' : true", "deliveryId": {"field": "data.id"},
        "data": {"a": "has(body.a) ? body.a : null", "size": "size(body)"}, "maxDataBytes": 64,
    })
    body = parse_body(kind, raw)
    if isinstance(body, Refusal):
        assert body.status == 400
        return
    context = {"body": body, "headers": visible_headers(headers)}
    for outcome in (passes_filter(trigger, context), trigger_data(trigger, context)):
        assert not isinstance(outcome, Refusal) or 400 <= outcome.status < 500
    verified = Verified(delivery_id=None, id_is_signed=False, timestamp=None, signed_digest="0" * 64)
    identity = delivery_identity(trigger, verified, headers, body, now=NOW)
    assert not isinstance(identity, Refusal) or identity.status == 400
