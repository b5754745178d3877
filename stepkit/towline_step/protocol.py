"""The step protocol, version 1: the contract between a step's container and the operator.

A contract crossed by several processes (the runner in a step pod, a step
type's own image, the operator), so it is defined once, here: where a step
finds its inputs and credentials (the environment variables and their
defaults), the result document's fields and their types, the error classes and
which are retried, the exit codes, the size, depth and delay limits, and
`read_result_message`, the strict reading the operator applies to whatever a
pod's termination message holds. docs/step-protocol.md is its prose for
step-type authors; docs/engine.md ("The result document") the operator's side.

The operator, the runner and the step SDK import this module, and a step type
written by hand may copy it, so it must stay standard library only: no
pydantic, no I/O. Whatever the message holds, reading it never raises: a
document that breaks the contract becomes a `permanent` failure that names the
field, and every number that later becomes a time is clamped here (and again
where the engine turns it into one).
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

PROTOCOL_VERSION = 1
"""The document's optional `version`; a document without one is version 1."""

# The step container's environment (a step type's image reads these; the runner's own step reads some).
PROTOCOL_VERSION_ENV = "TOWLINE_PROTOCOL_VERSION"
"""The protocol version the operator speaks, `1`."""
STEP_TYPE_ENV = "TOWLINE_STEP_TYPE"
"""`steptype/<name>` or `clustersteptype/<name>`: which registered type this container runs as."""
INPUTS_PATH_ENV = "TOWLINE_INPUTS_PATH"
"""A file holding the step's inputs, one JSON object (the step's `with`, bindings resolved)."""
CREDENTIALS_DIR_ENV = "TOWLINE_CREDENTIALS_DIR"
"""A directory with one `<slot>/<key>` file per credential key bound to the step."""
RESULT_PATH_ENV = "TOWLINE_RESULT_PATH"
"""Where the result document goes: the container's termination message file."""
IDEMPOTENCY_KEY_ENV = "TOWLINE_IDEMPOTENCY_KEY"
"""The same for every attempt of one attempt group: send it to providers that deduplicate on a key."""
DEADLINE_SECONDS_ENV = "TOWLINE_DEADLINE_SECONDS"
"""The attempt's time budget in seconds (a number); the pod is stopped (SIGTERM, then SIGKILL) past it."""
ALLOW_HOSTS_ENV = "TOWLINE_ALLOW_HOSTS"
"""A JSON list of the host names the step's egress policy allows (its `allowHosts`)."""
TRACEPARENT_ENV = "TRACEPARENT"
"""The attempt's span as a W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), set while the operator exports
traces: a span the step makes with it as its parent joins the run's trace. The one name outside `TOWLINE_`: the
name OpenTelemetry's environment carrier reads."""

DEFAULT_INPUTS_PATH = "/var/run/towline/step/inputs.json"
DEFAULT_CREDENTIALS_DIR = "/var/run/towline/credentials"
DEFAULT_RESULT_PATH = "/dev/termination-log"


# Where a step's files are, as its environment says or else where the pod puts them: read so by the runner, its
# prepare step and the SDK alike.
def inputs_path_from(environ: Mapping[str, str]) -> Path:
    return Path(environ.get(INPUTS_PATH_ENV) or DEFAULT_INPUTS_PATH)


def credentials_dir_from(environ: Mapping[str, str]) -> Path:
    return Path(environ.get(CREDENTIALS_DIR_ENV) or DEFAULT_CREDENTIALS_DIR)


def result_path_from(environ: Mapping[str, str]) -> Path:
    """Known even when the rest of the environment is broken, so a failure is reported."""
    return Path(environ.get(RESULT_PATH_ENV) or DEFAULT_RESULT_PATH)


def step_environment(
    *, allow_hosts: Sequence[str], inputs_path: str = DEFAULT_INPUTS_PATH,
    credentials_dir: str = DEFAULT_CREDENTIALS_DIR, result_path: str = DEFAULT_RESULT_PATH,
    idempotency_key: str | None = None, step_type: str | None = None, deadline_seconds: float | None = None,
    traceparent: str | None = None,
) -> dict[str, str]:
    """The variables above as a step's container gets them (the SDK's `read_environment` reads them back).

    Written here once: the operator writes them into a step type's pod, the SDK's local harness into the
    process it runs; unset ones are left out. Seconds are written as a whole number when they are one.
    """
    seconds = None if deadline_seconds is None else (
        str(int(deadline_seconds)) if float(deadline_seconds).is_integer() else repr(float(deadline_seconds)))
    environ = {
        PROTOCOL_VERSION_ENV: str(PROTOCOL_VERSION),
        STEP_TYPE_ENV: step_type,
        INPUTS_PATH_ENV: inputs_path,
        CREDENTIALS_DIR_ENV: credentials_dir,
        RESULT_PATH_ENV: result_path,
        IDEMPOTENCY_KEY_ENV: idempotency_key,
        DEADLINE_SECONDS_ENV: seconds,
        ALLOW_HOSTS_ENV: json.dumps(list(allow_hosts), separators=(",", ":")),
        TRACEPARENT_ENV: traceparent,
    }
    return {name: value for name, value in environ.items() if value is not None}


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


@dataclass(frozen=True)
class TraceParent:
    """A W3C Trace Context `traceparent` (version 00): the trace, the parent span in it, and its flags."""

    trace_id: int
    span_id: int
    flags: int = 1

    def header(self) -> str:
        """The header's text, as it is sent and as TRACEPARENT holds it."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{self.flags:02x}"


def parse_traceparent(text: str | None) -> TraceParent | None:
    """`text` as a version-00 `traceparent`, or None for anything else (an all-zero trace or span id included).

    Strict, as the W3C recommendation asks of a receiver: lowercase hex, exact lengths, nothing around it. A
    traceparent only ever names where a span belongs, so one that is not understood is dropped, never an error.
    """
    found = _TRACEPARENT.fullmatch(text or "")
    if found is None:
        return None
    trace_id, span_id, flags = (int(part, 16) for part in found.groups())
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id, span_id, flags)

EXIT_OK = 0
EXIT_PERMANENT = 1
"""A failure a retry would not fix (and any exit code the protocol does not name)."""
EXIT_USAGE = 2
"""The inputs are not what the step accepts (`validation`)."""
EXIT_RETRYABLE = 75
"""EX_TEMPFAIL: worth another attempt."""

CREDENTIAL_SLOT_PATTERN = r"[a-z][a-z0-9_]{0,62}"
"""A credential slot's name (a directory under the credentials directory): what the StepType schema accepts, the
pattern of a workflow step's `credentials` keys, which bind it (no `-`)."""
CREDENTIAL_KEY_PATTERN = r"[-._a-zA-Z0-9]+"
"""A credential key: a Secret data key, as the API server accepts it (a file in its slot's directory)."""

MISSING_SECRETS_FIELD = "missingSecrets"
"""Result-document field: the names of the Secrets the step names but whose mount is empty (an `auth` failure)."""
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


RETRYABLE_CLASSES: tuple[ErrorClass, ...] = (ErrorClass.TRANSIENT, ErrorClass.RATE_LIMIT, ErrorClass.TIMEOUT)
"""The classes worth another attempt, and a retry policy's default `retryOn` (in this order).

A deadline hit before anything left the pod is as safe to retry as a transient
failure; everything else needs a person or a reconciliation first."""


def exit_code_for(error_class: ErrorClass | None) -> int:
    """The exit code that goes with a result: EXIT_OK for none (success), else by the class's retry rule."""
    if error_class is None:
        return EXIT_OK
    if error_class is ErrorClass.VALIDATION:
        return EXIT_USAGE
    return EXIT_RETRYABLE if error_class in RETRYABLE_CLASSES else EXIT_PERMANENT


@dataclass(frozen=True)
class Result:
    """One attempt's outcome in the result document's terms: what a writer renders and the reader returns.

    The runner's StepResult and the SDK's Outcome (which render it) and ResultDocument (what the operator reads
    back) are this one record; each adds only its side's constructors and wire form.
    """

    ok: bool
    output: Any = None
    error_class: ErrorClass | None = None
    """Set exactly when `ok` is false; an unknown or missing class reads as `permanent`."""
    message: str | None = None
    retry_after_seconds: float | None = None
    """Within [0, MAX_RETRY_AFTER_SECONDS]."""
    usage: dict[str, Any] | None = None
    missing_secrets: tuple[str, ...] = ()
    """Names (never values) of the Secrets the step names whose mount is empty; only with an `auth` failure."""

    @property
    def exit_code(self) -> int:
        return exit_code_for(None if self.ok else (self.error_class or ErrorClass.PERMANENT))

    def wire_form(self, retryable: bool | None) -> dict[str, Any]:
        """The document as JSON would carry it (no `version`: version 1); `missingSecrets` only when there are some."""
        document: dict[str, Any] = {
            "ok": self.ok,
            "output": self.output,
            "errorClass": None if self.error_class is None else self.error_class.value,
            "message": self.message,
            "retryable": retryable,
            "retryAfterSeconds": self.retry_after_seconds,
            "usage": self.usage,
        }
        if self.missing_secrets:
            document[MISSING_SECRETS_FIELD] = list(self.missing_secrets)
        return document


@dataclass(frozen=True)
class ResultDocument(Result):
    """One attempt's outcome as the operator may trust it: every field of its declared type and in range."""

    retryable: bool | None = None


AnyResult = TypeVar("AnyResult", bound=Result)


def fit_result(result: AnyResult, render: Callable[[AnyResult], str]) -> tuple[AnyResult, str]:
    """Drop `usage`, then halve the message (and drop the output), until the rendered document fits.

    The writers' last step: `render` is the writer's own wire form (redacted); a failure always fits in the end.
    """
    text = render(result)
    while len(text.encode("utf-8", "surrogatepass")) > RESULT_LIMIT_BYTES:
        if result.usage is not None:
            result = replace(result, usage=None)
        else:
            message = result.message or ""
            result = replace(result, output=None, message=message[: len(message) // 2] + "…")
        text = render(result)
    return result, text


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


def missing_result(exit_code: int) -> ResultDocument:
    """What an attempt whose container exited without a result document counts as.

    The exit code is the only word the step left: EXIT_RETRYABLE asks for another
    attempt (`transient`), anything else is `permanent`, never retried on a guess.
    """
    retryable = exit_code == EXIT_RETRYABLE
    return ResultDocument(
        ok=False, error_class=ErrorClass.TRANSIENT if retryable else ErrorClass.PERMANENT, retryable=retryable,
        message=f"the step's container exited with code {exit_code} without writing a result document to "
        f"${RESULT_PATH_ENV}; a step must write one (docs/step-protocol.md)",
    )


def refused(why: str) -> ResultDocument:
    return ResultDocument(
        ok=False, error_class=ErrorClass.PERMANENT, retryable=False,
        message=f"the step's result document breaks the step protocol: {why}; a built-in step's runner or a "
        "step type's image writes it (docs/step-protocol.md), and nothing else may write its termination message",
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
