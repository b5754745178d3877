"""Small text helpers the engine and the plugin share: messages cut to fit their status fields, durations as
people read them. Standard library only, outside the engine package, so the plugin's start does not load the engine."""

from __future__ import annotations


def clip(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def elapsed(seconds: float) -> str:
    """`1.2s`, `3m04s`, `2h05m`: the run's DURATION column and the plugin's tables say it the same way."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
