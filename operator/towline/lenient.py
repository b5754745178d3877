"""Lenient reads of JSON documents this process did not write (API objects as served, the archive's answers): a
member of an unexpected type reads as empty, never raises. Standard library only."""

from __future__ import annotations

from typing import Any


def as_mapping(value: Any) -> dict[str, Any]:
    """`value` if it is an object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_text(value: Any) -> str | None:
    """`value` as text; None for a missing or empty one."""
    return str(value) if value not in (None, "") else None
