"""The step protocol, version 1: the result document a step writes and the operator reads.

A contract crossed by two processes (the runner in a step pod, the operator), so it
is defined once, here: the fields and their types, the error classes, the size,
depth and delay limits, and `read_result_message`, the strict reading the operator
applies to whatever a pod's termination message holds. docs/engine.md ("The result
document") is its prose.

The operator imports this module (an edge the import contracts allow explicitly),
so it must stay standard library only: no pydantic, no I/O. Whatever the message
holds, reading it never raises: a document that breaks the contract becomes a
`permanent` failure that names the field, and every number that later becomes a
time is clamped here (and again where the engine turns it into one).
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from towline_connectors.wire import MISSING_SECRETS_FIELD

PROTOCOL_VERSION = 1
"""The document's optional `version`; a document without one is version 1."""
RESULT_LIMIT_BYTES = 4096
"""The kubelet truncates a termination message beyond this; a longer message is refused."""
MAX_RETRY_AFTER_SECONDS = 86_400.0
"""The longest `retryAfterSeconds` honoured (one day, as a retry policy's maxDelaySeconds); more waits this long."""
MAX_DOCUMENT_DEPTH = 32
"""Arrays and objects nested deeper than this (in `output` or `usage`) refuse the document."""
MAX_MESSAGE_CHARS = 2048
"""A longer `message` is cut to this many characters."""
MAX_MISSING_SECRETS = 64
_INT64 = 2**63
"""Integers beyond int64 refuse the document: the API server and CEL carry no larger."""


class ErrorClass(enum.StrEnum):
    """What went wrong, in the vocabulary the engine's retry policy understands."""

    VALIDATION = "validation"
    AUTH = "auth"
    RATE_LIMIT = "rate_limit"
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    UNKNOWN_SIDE_EFFECT = "unknown_side_effect"
    OUTPUT_TOO_LARGE = "output_too_large"
    TIMEOUT = "timeout"


# A deadline hit before anything left the pod is as safe to retry as a transient
# failure; everything else needs a person or a reconciliation first.
RETRYABLE_CLASSES = frozenset({ErrorClass.RATE_LIMIT, ErrorClass.TRANSIENT, ErrorClass.TIMEOUT})


@dataclass(frozen=True)
class ResultDocument:
    """One attempt's outcome as the operator may trust it: every field of its declared type and in range."""

    ok: bool
    output: Any = None
    error_class: ErrorClass | None = None
    """Set exactly when `ok` is false; an unknown or missing class reads as `permanent`."""
    message: str | None = None
    retryable: bool | None = None
    retry_after_seconds: float | None = None
    """Within [0, MAX_RETRY_AFTER_SECONDS]."""
    usage: dict[str, Any] | None = None
    missing_secrets: tuple[str, ...] = ()


class _RefusedError(Exception):
    """The message is JSON, but not a document this protocol accepts; the text says why."""


def clamp_delay_seconds(value: float) -> float:
    """A delay in [0, MAX_RETRY_AFTER_SECONDS]; NaN counts as none (0), infinity as the maximum."""
    if math.isnan(value) or value <= 0:
        return 0.0
    return min(float(value), MAX_RETRY_AFTER_SECONDS)


def read_result_message(text: str) -> ResultDocument | None:
    """The termination message as a result document; None when it is not JSON at all.

    Not JSON is the container runtime's own text (a StartError, say): the caller
    reports it in its own words. Anything JSON is this protocol's to judge.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > RESULT_LIMIT_BYTES:
        return refused(f"it is {size} bytes, over the {RESULT_LIMIT_BYTES}-byte limit")
    try:
        document = json.loads(text, parse_constant=_no_constant, parse_int=_int64, parse_float=_finite)
    except _RefusedError as error:
        return refused(str(error))
    except RecursionError:
        return refused(f"it nests arrays or objects deeper than {MAX_DOCUMENT_DEPTH} levels")
    except ValueError:
        return None
    return parse_result_document(document)


def parse_result_document(document: object) -> ResultDocument:
    """A decoded document, checked field by field; a broken one is a `permanent` failure naming the field."""
    try:
        return _parse(document)
    except _RefusedError as error:
        return refused(str(error))


def refused(why: str) -> ResultDocument:
    return ResultDocument(
        ok=False, error_class=ErrorClass.PERMANENT, retryable=False,
        message=f"the step's result document breaks the step protocol: {why}; the runner writes it, so "
        "check that the step runs the runner image and nothing else writes its termination message",
    )


def _parse(document: object) -> ResultDocument:
    if not isinstance(document, dict):
        raise _RefusedError(f"it is {_kind(document)}, not a JSON object")
    _check_tree(document)
    version = document.get("version", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise _RefusedError(f"'version' is {version!r}; this operator reads version {PROTOCOL_VERSION}")
    if "ok" not in document:
        raise _RefusedError("it lacks the field 'ok'")
    ok = _typed(document, "ok", bool, "true or false", required=True)
    message = _typed(document, "message", str, "a string")
    retryable = _typed(document, "retryable", bool, "true, false or null")
    usage = _typed(document, "usage", dict, "an object")
    names = _typed(document, MISSING_SECRETS_FIELD, list, "a list of Secret names")
    if names is not None and not all(isinstance(name, str) and name for name in names):
        raise _RefusedError(f"'{MISSING_SECRETS_FIELD}' must list Secret names (non-empty strings)")
    raw_class = _typed(document, "errorClass", str, "an error class name")
    retry_after = document.get("retryAfterSeconds")
    if retry_after is not None and (isinstance(retry_after, bool) or not isinstance(retry_after, int | float)):
        raise _RefusedError(f"'retryAfterSeconds' must be a number of seconds or null, not {_kind(retry_after)}")
    if isinstance(retry_after, float) and math.isnan(retry_after):
        raise _RefusedError("'retryAfterSeconds' is NaN")
    error_class: ErrorClass | None = None
    if not ok:
        error_class, message = _error_class(raw_class, message)
    return ResultDocument(
        ok=ok,
        output=document.get("output"),
        error_class=error_class,
        message=None if message is None else message[:MAX_MESSAGE_CHARS],
        retryable=retryable,
        retry_after_seconds=None if retry_after is None else _clamp_number(retry_after),
        usage=usage,
        missing_secrets=tuple(names[:MAX_MISSING_SECRETS]) if names else (),
    )


def _error_class(raw: str | None, message: str | None) -> tuple[ErrorClass, str | None]:
    """A failure's class: a known name, else `permanent` (never retried on a guess), said in the message."""
    if raw is None:
        return ErrorClass.PERMANENT, message
    try:
        return ErrorClass(raw), message
    except ValueError:
        shown = json.dumps(raw[:64])
        return ErrorClass.PERMANENT, f"unknown error class {shown} treated as permanent: {message or '(no message)'}"


def _clamp_number(value: int | float) -> float:
    if isinstance(value, int) and value > MAX_RETRY_AFTER_SECONDS:
        return MAX_RETRY_AFTER_SECONDS  # before float(): an int past float's range would overflow
    return clamp_delay_seconds(float(value))


def _typed(document: Mapping[str, Any], field: str, kind: type, wanted: str, *, required: bool = False) -> Any:
    value = document.get(field)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise _RefusedError(f"'{field}' must be {wanted}, not {_kind(value)}")
    return value


def _check_tree(document: dict[str, Any]) -> None:
    """Depth, finite numbers, int64 integers and encodable strings throughout, without recursion."""
    pending: list[tuple[object, int]] = [(document, 0)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DOCUMENT_DEPTH:
            raise _RefusedError(f"it nests arrays or objects deeper than {MAX_DOCUMENT_DEPTH} levels")
        if isinstance(value, str):
            _encodable(value)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if abs(value) >= _INT64:
                raise _RefusedError("it holds an integer beyond 64 bits")
        elif isinstance(value, float):
            _finite(repr(value))
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _RefusedError(f"it has a non-string key {_kind(key)}")
                _encodable(key)
                pending.append((item, depth + 1))
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)
        else:
            raise _RefusedError(f"it holds {_kind(value)}, which JSON does not")


def _encodable(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _RefusedError("it holds a string that is not valid Unicode (a lone surrogate escape)") from None


def _no_constant(name: str) -> Any:
    raise _RefusedError(f"it holds {name}, which JSON does not allow")


def _int64(text: str) -> int:
    value = int(text) if len(text) <= 20 else _INT64  # never parse thousands of digits
    if abs(value) >= _INT64:
        raise _RefusedError(f"it holds the integer {text[:24]}{'…' if len(text) > 24 else ''}, beyond 64 bits")
    return value


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _RefusedError(f"it holds the number {text[:24]}, beyond what a double carries")
    return value


def _kind(value: object) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    return names.get(type(value), f"a {type(value).__name__}")
