"""Small text helpers: messages cut to fit their status fields, times as RFC 3339."""

from __future__ import annotations

from datetime import datetime


def clip(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
