"""Replace known secret values with `[REDACTED]` in everything the runner emits.

Secrets leak through many encodings (JSON escapes, reprs in tracebacks, URL
quoting, one line of a multi-line key), so every value is registered in the forms
it is likely to take. This module must never log or store a value anywhere but
in its own memory.
"""

from __future__ import annotations

import io
import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any, Protocol


class TextSink(Protocol):
    """Anything text can be written to: a file, sys.stderr, a RedactingStream."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


PLACEHOLDER = "[REDACTED]"

# One line of a multi-line secret (a PEM key, a JSON key file) is registered on
# its own so line-buffered streams still catch it; shorter lines ("}", "-----")
# carry no secret material and would only garble output.
_MIN_LINE_LENGTH = 8


def secret_variants(secret: str) -> set[str]:
    """The forms a secret value takes in text: raw, escaped, quoted, line by line."""
    variants = {secret, secret.strip()}
    for form in list(variants):
        variants.add(json.dumps(form)[1:-1])
        variants.add(repr(form)[1:-1])
        variants.add(repr(form.encode("utf-8", "surrogateescape"))[2:-1])
        variants.add(urllib.parse.quote(form, safe=""))
        variants.add(urllib.parse.quote(form))
        variants.add(urllib.parse.quote_plus(form))
    if "\n" in secret:
        variants.update(line.strip() for line in secret.splitlines() if len(line.strip()) >= _MIN_LINE_LENGTH)
    return {variant for variant in variants if variant.strip()}


class Redactor:
    """Knows every secret value of this step and scrubs them from text and data."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str) -> None:
        """Register a value (and its encodings). Empty or blank values are ignored."""
        new = secret_variants(secret) - self._secrets
        if not new:
            return
        self._secrets |= new
        # Longest first so a secret that contains another is replaced whole.
        ordered = sorted(self._secrets, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in ordered))

    def redact(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(PLACEHOLDER, text)

    def clip(self, text: str, limit: int, marker: str = "…") -> str:
        """Redact, then cut to `limit` characters: a secret straddling the cut never leaves a prefix behind."""
        clean = self.redact(text)
        return clean if len(clean) <= limit else clean[:limit] + marker

    def contains_secret(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def redact_value(self, value: Any) -> Any:
        """Scrub a JSON-like value; numbers equal to a secret become the placeholder."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            return PLACEHOLDER if str(value) in self._secrets else value
        if isinstance(value, dict):
            return {self.redact(str(k)): self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(item) for item in value]
        return self.redact(str(value))


class RedactingStream(io.TextIOBase):
    """A text stream that redacts whole lines before passing them on.

    Buffering by line matters: tracebacks and loggers write a line in several
    pieces, and a secret split across two writes would slip through.
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
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase declares it writable
        return getattr(self._target, "encoding", "utf-8") or "utf-8"
