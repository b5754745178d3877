"""Small text helpers: messages cut to fit their status fields."""

from __future__ import annotations


def clip(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"

