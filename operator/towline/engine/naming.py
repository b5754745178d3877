"""Deterministic, DNS-safe names for the objects a run owns.

The same run, step and attempt always give the same name, so a restart finds
what it created before (and a second create is a harmless 409). Names are
valid DNS labels: at most 63 lowercase letters, digits and '-', starting and
ending alphanumeric; a long name keeps a readable prefix and gets a hash of the
full name, so two long names never collide by truncation.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 63
GATE_SUFFIX = "__approval"
"""Step ids ending in this are reserved for approval gates the policy inserts."""

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_HASH_LENGTH = 8


def dns_label(text: str, *, limit: int = MAX_NAME_LENGTH) -> str:
    """`text` as a DNS label of at most `limit` characters, with a hash suffix when shortened."""
    label = _NOT_DNS.sub("-", text.lower().replace("_", "-").replace(".", "-")).strip("-") or "x"
    if len(label) <= limit:
        return label
    return f"{label[: limit - _HASH_LENGTH - 1].rstrip('-')}-{short_hash(text)}"


def short_hash(text: str) -> str:
    """What tells two shortened names apart: the start of the SHA-256 of the full text."""
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LENGTH]


def job_name(run_name: str, step_id: str, attempt: int) -> str:
    """`<run>-<step>-<attempt>`; the attempt number always survives shortening."""
    suffix = f"-{attempt}"
    return dns_label(f"{run_name}-{step_id}", limit=MAX_NAME_LENGTH - len(suffix)) + suffix


def approval_name(run_name: str, step_id: str) -> str:
    """`<run>-<step>`: one Approval per gate per run."""
    return dns_label(f"{run_name}-{step_id}")


def gate_id(step_id: str) -> str:
    """The id of the approval gate the policy inserts before `step_id`; a valid step identifier."""
    candidate = step_id + GATE_SUFFIX
    if len(candidate) <= MAX_NAME_LENGTH:
        return candidate
    keep = MAX_NAME_LENGTH - len(GATE_SUFFIX) - _HASH_LENGTH - 1
    return f"{step_id[:keep]}_{short_hash(step_id)}{GATE_SUFFIX}"
