"""The ids of loop instances (`deploy[0]`, `deploy[eu-west-1]`): patterns and helpers, standard library only.

Apart from towline.api.loops (pydantic models) so the plugin's display model reads instance ids without loading
pydantic at its start (tests/unit/test_import_weight.py).
"""

from __future__ import annotations

import re

LOOP_KEY_PATTERN = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,38}[A-Za-z0-9])?"
"""A `forEach.key` value: what goes between the brackets of an instance id, at most 40 characters."""
INSTANCE_ID_PATTERN = rf"^[a-z][a-z0-9_]{{0,62}}(\[{LOOP_KEY_PATTERN}\])?$"
"""A step id, or an instance's: `deploy`, `deploy[0]`, `deploy[eu-west-1]`."""
_INSTANCE = re.compile(rf"^([a-z][a-z0-9_]{{0,62}})\[({LOOP_KEY_PATTERN})\]$")
_KEY = re.compile(rf"^{LOOP_KEY_PATTERN}$")


def instance_id(step_id: str, key: str | int) -> str:
    """`deploy[0]` or `deploy[eu-west-1]`."""
    return f"{step_id}[{key}]"


def loop_of(entry_id: str) -> str | None:
    """The loop step an instance id belongs to (`deploy` for `deploy[0]`); None for a plain step id."""
    match = _INSTANCE.match(entry_id)
    return match.group(1) if match else None


def instance_key(entry_id: str) -> str | None:
    """What is between an instance id's brackets; None for a plain step id."""
    match = _INSTANCE.match(entry_id)
    return match.group(2) if match else None


def is_loop_key(value: str) -> bool:
    return _KEY.match(value) is not None
