"""CloudEvents at the ingress: the HTTP binding (structured and binary modes, JSON data), parsed per the
CloudEvents 1.0 specification within the ingress's bounds. Pure: no I/O.

Structured mode is `Content-Type: application/cloudevents+json`, the event a
JSON object in the body; binary mode carries the attributes in `ce-` headers
(percent-encoded) and the data as the body. Batches and `data_base64` are
refused: a trigger takes one event with JSON data.

In binary mode the attributes are headers, which no body signature covers:
`signed_attributes` is what the signature covers before the body (every
`ce-` header and the Content-Type, sorted), so the event id and source that
name the run, and the type and subject a filter reads, are as signed as the
data. Structured mode's body already holds every attribute.

The CloudEvents SDK is not used here: it bounds no attribute, names no field
in its errors, and cannot tell which raw headers were signed. Tests send with
it (its `to_structured` / `to_binary`) to show the two agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from towline.api.webhooks import MAX_EVENT_SOURCE, MAX_EVENT_TYPE, CloudEventTrigger
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.runname import MAX_DELIVERY_ID
from towline.triggers.ingress.signed import utf8

STRUCTURED = "application/cloudevents+json"
ACCEPTED_MEDIA = (STRUCTURED, "application/json")
"""Structured mode, and binary mode's JSON data (binary mode may also send no Content-Type)."""
SPEC_VERSION = "1.0"
REQUIRED = ("id", "source", "specversion", "type")
ATTRIBUTE_NAME = re.compile(r"[a-z0-9]{1,20}")
"""Attribute names as the specification has them: lower-case letters and digits, at most 20."""
MAX_ATTRIBUTES = 32
MAX_ATTRIBUTE_VALUE = 1024
LIMITS = {"id": MAX_DELIVERY_ID, "source": MAX_EVENT_SOURCE, "type": MAX_EVENT_TYPE}


@dataclass(frozen=True)
class CloudEvent:
    """One parsed, validated event: its context attributes and its data."""

    attributes: dict[str, str | int | bool]
    data: Any

    @property
    def id(self) -> str:
        return str(self.attributes["id"])

    @property
    def source(self) -> str:
        return str(self.attributes["source"])

    @property
    def type(self) -> str:
        return str(self.attributes["type"])

    def as_cel(self) -> dict[str, Any]:
        """`event` as a trigger's filter and data read it: the attributes, and the payload as `event.data`."""
        return {"event": {**self.attributes, "data": self.data}}


def accepts(media: str, headers: Mapping[str, str]) -> bool:
    """Whether a request's content type can carry a CloudEvent (checked before the body is read)."""
    if media == STRUCTURED:
        return True
    return "ce-specversion" in headers and (media == "" or _is_json(media))


def signed_attributes(headers: Mapping[str, str]) -> bytes:
    """Binary mode: what the signature covers before the body; structured mode: nothing (the body holds it all).

    `<name>:<value>\\n` for each `ce-` header, sorted by name, as sent (before percent-decoding), then
    `content-type:<value>\\n` and an empty line.
    """
    if "ce-specversion" not in headers:
        return b""
    lines = sorted((name, value) for name, value in headers.items() if name.startswith("ce-"))
    text = "".join(f"{name}:{value}\n" for name, value in lines)
    return utf8(f"{text}content-type:{headers.get('content-type', '')}\n\n")


def parse_event(media: str, headers: Mapping[str, str], raw: bytes) -> CloudEvent | Refusal:
    """The event a request carries, or a 400/415 naming the attribute and the fix."""
    if media == STRUCTURED:
        return _structured(raw)
    return _binary(media, headers, raw)


def _structured(raw: bytes) -> CloudEvent | Refusal:
    document = _json(raw, "the body (structured mode)")
    if isinstance(document, Refusal):
        return document
    if not isinstance(document, dict):
        return bad_event("a structured-mode body must be one JSON object (batches are not accepted)")
    if "data_base64" in document:
        return Refusal(415, "UnsupportedContentType", "data_base64 is not accepted: send the data as JSON in data")
    data = document.get("data")
    attributes = {name: value for name, value in document.items() if name != "data"}
    content_type = attributes.get("datacontenttype")
    if "data" in document and content_type is not None and not (isinstance(content_type, str)
                                                                 and _is_json(content_type)):
        return Refusal(415, "UnsupportedContentType", "datacontenttype must be application/json (or a +json "
                       "type): a trigger takes JSON data")
    return _validated(attributes, data)


def _binary(media: str, headers: Mapping[str, str], raw: bytes) -> CloudEvent | Refusal:
    attributes: dict[str, Any] = {}
    for name, value in headers.items():
        if name.startswith("ce-"):
            try:
                attributes[name[3:]] = unquote(value, errors="strict")
            except UnicodeDecodeError:
                return bad_event(f"header {name[:40]} is not percent-encoded UTF-8")
    if media:
        attributes["datacontenttype"] = headers.get("content-type", media).strip()
    data = None
    if raw.strip():
        data = _json(raw, "the data (binary mode's body)")
        if isinstance(data, Refusal):
            return data
    return _validated(attributes, data)


def _validated(attributes: dict[str, Any], data: Any) -> CloudEvent | Refusal:  # noqa: PLR0911 - one per rule
    for name in REQUIRED:
        value = attributes.get(name)
        if not isinstance(value, str) or not value:
            return bad_event(f"the required attribute {name} is missing or empty (CloudEvents needs id, source, "
                             "specversion and type)")
    if attributes["specversion"] != SPEC_VERSION:
        return bad_event(f"specversion {str(attributes['specversion'])[:20]!r} is not accepted; send 1.0")
    if len(attributes) > MAX_ATTRIBUTES:
        return bad_event(f"{len(attributes)} attributes, more than {MAX_ATTRIBUTES}")
    for name, value in attributes.items():
        if name == "data" or not ATTRIBUTE_NAME.fullmatch(name):
            return bad_event(f"attribute name {name[:40]!r} is not valid: lower-case letters and digits, at most "
                             "20 (and not data)")
        if isinstance(value, bool) or (isinstance(value, int) and abs(value) < 2**31):
            continue
        if not isinstance(value, str):
            return bad_event(f"attribute {name} must be a string, an integer or a boolean")
        limit = LIMITS.get(name, MAX_ATTRIBUTE_VALUE)
        if len(value) > limit:
            return bad_event(f"attribute {name} is {len(value)} characters, more than {limit}")
    if "time" in attributes and not _rfc3339(attributes["time"]):
        return bad_event("attribute time must be an RFC 3339 timestamp, e.g. 2026-12-07T08:00:00Z")
    return CloudEvent(attributes, data)


def matches(trigger: CloudEventTrigger, event: CloudEvent) -> str | None:
    """Why the trigger does not take this event (its type or source is not listed), or None."""
    if event.type not in trigger.types:
        return f"type {event.type[:100]!r} is not one of this trigger's types ({', '.join(trigger.types)[:300]})"
    if trigger.sources and event.source not in trigger.sources:
        return (f"source {event.source[:100]!r} is not one of this trigger's sources "
                f"({', '.join(trigger.sources)[:300]})")
    return None


def event_identity(event: CloudEvent) -> str:
    """What names the event's run: its source and id (the specification makes the pair unique per event)."""
    return f"cloudevent:{len(event.source)}:{event.source}:{event.id}"


def bad_event(message: str) -> Refusal:
    return Refusal(400, "BadEvent", f"not a valid CloudEvent: {message}")


def _json(raw: bytes, what: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        return Refusal(400, "BadBody", f"{what} is not valid JSON: {str(error)[:200]}")


def _is_json(media: str) -> bool:
    kind = media.split(";", 1)[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _rfc3339(value: Any) -> bool:
    if not isinstance(value, str) or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)",
                                                      value, re.IGNORECASE):
        return False
    try:
        datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", value.upper().replace("Z", "+00:00")))
    except ValueError:
        return False
    return True
