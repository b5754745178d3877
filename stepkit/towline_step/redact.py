"""Keep the credential values a step loaded out of its logs and its result document.

Towline cannot rewrite what a step type's image prints: the pod's stdout and
stderr are its logs. So the SDK registers every credential value it reads here,
and the step's `sys.stdout`, `sys.stderr` and log records pass through a
`RedactingStream` that replaces each value, in the encodings it is likely to
take (JSON and repr escapes, URL quoting, one line of a multi-line key), with
`[REDACTED]`. Standard library only: the one redactor of the project (the
connectors' runner and the operator's log formatter use it through
`towline_connectors.redact`), and a step type's image holds it without them.

This module must never write a value anywhere but its own memory. What it
cannot see it cannot redact: bytes a subprocess or C code writes straight to
file descriptors 1 and 2 bypass it.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import urllib.parse
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

PLACEHOLDER = "[REDACTED]"
_MIN_LINE_LENGTH = 8
"""Lines of a multi-line value shorter than this ("}", "-----") carry no secret and would garble output."""


class TextSink(Protocol):
    """Anything text is written to: a file, sys.stderr, another RedactingStream."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


def secret_forms(secret: str) -> set[str]:
    """The forms a value takes in text: raw, stripped, JSON- and repr-escaped, URL-quoted, line by line."""
    forms = {secret, secret.strip()}
    for form in list(forms):
        forms.add(json.dumps(form)[1:-1])
        forms.add(json.dumps(form, ensure_ascii=False)[1:-1])
        forms.add(repr(form)[1:-1])
        forms.add(repr(form.encode("utf-8", "surrogateescape"))[2:-1])
        forms.add(urllib.parse.quote(form, safe=""))
        forms.add(urllib.parse.quote(form))
        forms.add(urllib.parse.quote_plus(form))
        forms.update(line.strip() for line in secret.splitlines() if len(line.strip()) >= _MIN_LINE_LENGTH)
    return {form for form in forms if form.strip()}


class Redactor:
    """Every credential value of this step, and the means to scrub it from text and JSON values."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str) -> None:
        """Register a value and its encodings; blank values are ignored (they would match everywhere)."""
        new = secret_forms(secret) - self._forms
        if not new:
            return
        self._forms |= new
        # Longest first: a value that contains another is replaced whole.
        ordered = sorted(self._forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(form) for form in ordered))

    def redact(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(PLACEHOLDER, text)

    def clip(self, text: str, limit: int, marker: str = "…") -> str:
        """Redact, then cut to `limit` characters: a value straddling the cut never leaves a prefix behind."""
        clean = self.redact(text)
        return clean if len(clean) <= limit else clean[:limit] + marker

    def contains_secret(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def redact_value(self, value: Any) -> Any:
        """A JSON value with every string (and key) scrubbed; a number equal to a value becomes the placeholder."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            return PLACEHOLDER if str(value) in self._forms else value
        if isinstance(value, dict):
            return {self.redact(str(key)): self.redact_value(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(item) for item in value]
        return self.redact(str(value))


class RedactingStream(io.TextIOBase):
    """A text stream that scrubs whole lines before passing them on.

    Line buffering matters: loggers and tracebacks write a line in pieces, and a
    value split across two writes would otherwise slip through.
    """

    def __init__(self, target: TextSink, redactor: Redactor) -> None:
        super().__init__()
        self._target = target
        self._redactor = redactor
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            complete, _, self._pending = self._pending.rpartition("\n")
            self._target.write(self._redactor.redact(complete + "\n"))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._target.write(self._redactor.redact(self._pending))
            self._pending = ""
        self._target.flush()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase declares it a plain attribute
        return getattr(self._target, "encoding", "utf-8") or "utf-8"


@contextlib.contextmanager
def logging_to(stream: TextSink, name: str) -> Iterator[logging.Logger]:
    """The logger `name`, writing INFO and above to `stream` (a RedactingStream) only, for the block's duration."""
    logger = logging.getLogger(name)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger
    finally:
        handler.flush()
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
