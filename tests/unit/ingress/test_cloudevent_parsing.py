"""CloudEvents at the ingress, without a cluster: what the reference SDK sends parses to the same event, in
both modes; bad attributes are refused naming them; binary mode's attributes are signed; the run name stays a
valid, bounded name whatever the id and source hold."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from cloudevents.v1.conversion import to_binary, to_structured
from cloudevents.v1.http import CloudEvent as SdkEvent

from towline.api.webhooks import CloudEventTrigger
from towline.api.workflow import WorkflowSpec
from towline.triggers.ingress import sign
from towline.triggers.ingress.cloudevents import (
    CloudEvent,
    accepts,
    event_identity,
    matches,
    parse_event,
    signed_attributes,
)
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.payload import media_type
from towline.triggers.ingress.runname import webhook_run_name
from towline.triggers.ingress.signed import SigningKeys
from towline.triggers.ingress.verify import decode_keys, verify_delivery
from towline.validation.triggers import trigger_errors

SECRET = "whsec_" + "c2VjcmV0LW9mLWF0LWxlYXN0LTE2LWJ5dGVz"
ATTRIBUTES = {"type": "com.example.order.paid", "source": "/shop/orders", "id": "evt-1", "subject": "A-1001"}


def _parse(headers: dict[str, str], body: bytes) -> CloudEvent | Refusal:
    lowered = {name.lower(): value for name, value in headers.items()}
    return parse_event(media_type(lowered.get("content-type")), lowered, body)


def _trigger(**extra: Any) -> CloudEventTrigger:
    return CloudEventTrigger.model_validate({"verify": {"scheme": "standard-webhooks",
                                                        "secretRef": {"name": "s", "key": "k"}},
                                             "types": ["com.example.order.paid"], **extra})


@pytest.mark.parametrize("mode", [to_structured, to_binary])
def test_the_sdks_event_parses_the_same_in_both_modes(mode: Any) -> None:
    headers, body = mode(SdkEvent(dict(ATTRIBUTES), {"order": {"id": "A-1001", "total": 12.5}}))
    lowered = {name.lower(): value for name, value in headers.items()}
    assert accepts(media_type(lowered.get("content-type")), lowered)
    event = _parse(headers, body)
    assert isinstance(event, CloudEvent), event
    assert (event.id, event.source, event.type) == ("evt-1", "/shop/orders", "com.example.order.paid")
    assert event.as_cel()["event"]["subject"] == "A-1001"
    assert event.as_cel()["event"]["data"] == {"order": {"id": "A-1001", "total": 12.5}}


def test_plain_json_without_ce_headers_is_not_a_cloud_event() -> None:
    assert not accepts("application/json", {"content-type": "application/json"})
    assert not accepts("application/cloudevents-batch+json", {})
    assert not accepts("application/octet-stream", {"ce-specversion": "1.0"})  # binary mode takes JSON data only


@pytest.mark.parametrize(("change", "field"), [
    ({"id": None}, "id"), ({"source": None}, "source"), ({"type": ""}, "type"),
    ({"specversion": "0.3"}, "specversion"), ({"id": "x" * 257}, "id"), ({"Bad-Name": "1"}, "Bad-Name"),
    ({"time": "yesterday"}, "time"), ({"ext": {"nested": 1}}, "ext"),
])
def test_an_invalid_attribute_is_refused_naming_it(change: dict[str, Any], field: str) -> None:
    document: dict[str, Any] = {"specversion": "1.0", **ATTRIBUTES, "data": {}}
    for name, value in change.items():
        if value is None:
            document.pop(name)
        else:
            document[name] = value
    refused = parse_event("application/cloudevents+json", {}, json.dumps(document).encode())
    assert isinstance(refused, Refusal)
    assert (refused.status, refused.reason) == (400, "BadEvent")
    assert field in refused.message


def test_base64_data_and_non_json_data_are_refused() -> None:
    refused = parse_event("application/cloudevents+json", {},
                          b'{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":"AA=="}')
    assert isinstance(refused, Refusal) and refused.status == 415 and "data_base64" in refused.message


def test_types_and_sources_match_exactly_and_say_why_not() -> None:
    event = CloudEvent({"specversion": "1.0", "id": "1", "source": "/shop/orders", "type": "com.example.order.paid"},
                       None)
    assert matches(_trigger(), event) is None
    assert matches(_trigger(sources=["/shop/orders"]), event) is None
    prefix = CloudEvent({**event.attributes, "type": "com.example.order.paid.v2"}, None)
    why = matches(_trigger(), prefix)
    assert why is not None and "com.example.order.paid.v2" in why and "types" in why
    why = matches(_trigger(sources=["/shop"]), event)
    assert why is not None and "sources" in why


def _verify(headers: dict[str, str], body: bytes) -> Any:
    lowered = {name.lower(): value for name, value in headers.items()}
    keys: SigningKeys = decode_keys("standard-webhooks", SECRET.encode(), None)
    verify = _trigger().verify
    return verify_delivery(verify, keys, lowered, signed_attributes(lowered) + body, now=time.time())


def test_binary_mode_signs_the_ce_headers_so_a_changed_id_fails_the_signature() -> None:
    headers, body = to_binary(SdkEvent(dict(ATTRIBUTES), {"a": 1}))
    signed = {**headers, **sign.cloud_event_standard_headers(SECRET, "msg-1", int(time.time()), headers, body)}
    assert not isinstance(_verify(signed, body), Refusal)
    forged = {**signed, "ce-id": "evt-2"}
    refused = _verify(forged, body)
    assert isinstance(refused, Refusal) and refused.status == 401


def test_structured_mode_signs_the_body_as_standard_webhooks_does() -> None:
    headers, body = to_structured(SdkEvent(dict(ATTRIBUTES), {"a": 1}))
    assert signed_attributes({k.lower(): v for k, v in headers.items()}) == b""
    signed = {**headers, **sign.standard_webhooks_headers(SECRET, "msg-1", int(time.time()), body)}
    assert not isinstance(_verify(signed, body), Refusal)


@pytest.mark.parametrize("hostile", [
    "../../etc/passwd", "x" * 256, "ÄÖÜ\u202e\u0000;rm -rf /", "UPPER.case_and spaces", "-", ".",
])
def test_the_run_name_is_a_valid_bounded_name_whatever_the_id_and_source(hostile: str) -> None:
    event = CloudEvent({"specversion": "1.0", "id": hostile, "source": hostile, "type": "t"}, None)
    name = webhook_run_name("ns", "orders", "paid", event_identity(event))
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    other = CloudEvent({**event.attributes, "source": hostile + "/other"}, None)
    assert webhook_run_name("ns", "orders", "paid", event_identity(other)) != name


def test_the_source_and_id_cannot_be_shifted_into_each_other() -> None:
    one = CloudEvent({"specversion": "1.0", "id": "b:c", "source": "a", "type": "t"}, None)
    two = CloudEvent({"specversion": "1.0", "id": "c", "source": "a:b", "type": "t"}, None)
    assert event_identity(one) != event_identity(two)


def _spec(cloud_event: dict[str, Any]) -> WorkflowSpec:
    return WorkflowSpec.model_validate({"steps": [{"id": "a", "action": "data.transform"}],
                                        "triggers": [{"name": "paid", "cloudEvent": cloud_event}]})


def test_the_operator_refuses_a_provider_scheme_naming_the_field() -> None:
    spec = _spec({"verify": {"scheme": "github", "secretRef": {"name": "s", "key": "k"}}, "types": ["t"]})
    errors = trigger_errors(spec)
    assert [error.field for error in errors] == ["spec.triggers[0].cloudEvent.verify.scheme"]


def test_the_operator_refuses_an_unsigned_trigger_without_allow_unsigned() -> None:
    spec = _spec({"verify": {"scheme": "none"}, "types": ["t"]})
    assert [error.field for error in trigger_errors(spec)] == ["spec.triggers[0].cloudEvent.verify.allowUnsigned"]


def test_the_operator_refuses_a_mapping_that_reads_anything_but_the_event() -> None:
    spec = _spec({"verify": {"scheme": "bearer", "secretRef": {"name": "s", "key": "k"}}, "types": ["t"],
                  "filter": "body.x == 1", "data": {"ok": "event.data.id", "bad": "headers['authorization']"}})
    fields = [error.field for error in trigger_errors(spec)]
    assert fields == ["spec.triggers[0].cloudEvent.filter", "spec.triggers[0].cloudEvent.data.bad"]
