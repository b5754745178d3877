"""What of a delivery enters the run: the trigger's `filter` and `data` mapping, evaluated with CEL.

Only the fields the workflow declares become `trigger.data`, capped in size;
everything else in the delivery stays out of the cluster. Credentials the
sender put in headers (Authorization, Cookie) are not visible to the mapping,
so no expression can copy them into a run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from towline.api.webhooks import CloudEventTrigger, WebhookTrigger
from towline.expressions import ExpressionError, evaluate
from towline.triggers.ingress.outcome import Refusal

HIDDEN_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse_body(kind: str, raw: bytes) -> Any:
    """The body as CEL sees it (`body`), or a Refusal saying why it does not parse."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Refusal(400, "BadBody", "the body is not UTF-8")
    if kind == "application/json":
        try:
            return json.loads(text) if text.strip() else {}
        except (ValueError, RecursionError) as error:
            return Refusal(400, "BadBody", f"the body is not valid JSON: {str(error)[:200]}")
    if kind == "application/x-www-form-urlencoded":
        return dict(parse_qsl(text, keep_blank_values=True))
    return text


def visible_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name not in HIDDEN_HEADERS}


def passes_filter(trigger: WebhookTrigger | CloudEventTrigger, context: Mapping[str, Any]) -> bool | Refusal:
    if trigger.filter is None:
        return True
    try:
        verdict = evaluate(trigger.filter, context)
    except ExpressionError as error:
        return Refusal(422, "FilterFailed", f"the trigger's filter failed on this delivery: {error}")
    if not isinstance(verdict, bool):
        return Refusal(422, "FilterFailed", f"the trigger's filter gave {type(verdict).__name__}, not true or false")
    return verdict


def trigger_data(trigger: WebhookTrigger | CloudEventTrigger, context: Mapping[str, Any]) -> dict[str, Any] | Refusal:
    data = {}
    for key, source in trigger.data.items():
        try:
            data[key] = evaluate(source, context)
        except ExpressionError as error:
            return Refusal(422, "DataMappingFailed", f"trigger.data.{key} could not be computed: {error}")
    size = len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())
    if size > trigger.max_data_bytes:
        return Refusal(422, "DataTooLarge", f"trigger.data would be {size} bytes, over the trigger's maxDataBytes "
                       f"({trigger.max_data_bytes}); map fewer or smaller fields")
    return data
