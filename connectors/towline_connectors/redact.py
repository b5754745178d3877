"""Replace known secret values with `[REDACTED]` in everything the runner emits.

Secrets leak through many encodings (JSON escapes, reprs in tracebacks, URL
quoting, one line of a multi-line key), so every value is registered in the forms
it is likely to take. One implementation serves the runner, the operator's log
formatter and the step SDK: the step kit's (standard library only), re-exported
here so the connectors and the operator keep one import.
"""

from __future__ import annotations

from towline_step.redact import PLACEHOLDER, RedactingStream, Redactor, TextSink, logging_to, secret_forms

__all__ = ["PLACEHOLDER", "RedactingStream", "Redactor", "TextSink", "logging_to", "secret_forms"]
