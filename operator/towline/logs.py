"""The operator's (and the ingress's) log lines: text or JSON, with run context, redacted.

Context (namespace, workflow, run, step, attempt) lives in context variables
set around the work it belongs to (`log_context`), so every line logged inside
carries it, whatever module logs it. asyncio copies context variables into each
task, so concurrent reconciles never see each other's context.

Redaction: a process registers every credential value it knows
(`remember_secret`); each line is scrubbed of those values in every encoding
the connectors' redactor knows, after formatting (message, arguments,
tracebacks, context). The operator knows no credential by design and registers
none; the webhook ingress registers its signing secrets. This module never
stores a value anywhere but in the redactor's memory.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from towline_connectors.redact import Redactor

CONTEXT_FIELDS = ("namespace", "workflow", "run", "step", "attempt")
_CONTEXT: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("towline_log_context", default={})  # noqa: B039 - never mutated
_REDACTOR = Redactor()


def remember_secret(value: str) -> None:
    """Scrub `value` (in its common encodings) from every log line from now on."""
    _REDACTOR.add(value)


def redact(text: str) -> str:
    """`text` without any value registered with `remember_secret` (what else keeps text a delivery brought: the
    ingress's dead letters)."""
    return _REDACTOR.redact(text)


@contextmanager
def log_context(**fields: str | int | None) -> Iterator[None]:
    """Add fields (namespace, workflow, run, step, attempt) to every line logged inside."""
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise ValueError(f"unknown log context fields {sorted(unknown)}; use {CONTEXT_FIELDS}")
    merged = {**_CONTEXT.get(), **{k: str(v) for k, v in fields.items() if v is not None}}
    token = _CONTEXT.set(merged)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current_context() -> dict[str, str]:
    return dict(_CONTEXT.get())


class _ContextFilter(logging.Filter):
    """Attaches the current context to the record (the handler's filter runs in the logging task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.towline_context = current_context()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context fields, any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "towline_context", {}),
        }
        if record.exc_info:
            document["traceback"] = self.formatException(record.exc_info)
        return _REDACTOR.redact(json.dumps(document, ensure_ascii=False, default=str))


class TextFormatter(logging.Formatter):
    """The classic line, with the context appended as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = getattr(record, "towline_context", {})
        if context:
            line += " [" + " ".join(f"{key}={value}" for key, value in context.items()) + "]"
        return _REDACTOR.redact(line)


def configure_logging(level: str, log_format: str) -> logging.Handler:
    """Root logging for a Towline process: `log_format` is text or json."""
    if log_format not in ("text", "json"):
        raise ValueError(f"--log-format {log_format!r}: use text or json")
    handler = logging.StreamHandler()
    handler.addFilter(_ContextFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    return handler
