"""Deterministic, DNS-safe names for the objects a run owns.

The same run, step and attempt always give the same name, so a restart finds
what it created before (and a second create is a harmless 409). Names are
valid DNS labels: at most 63 lowercase letters, digits and '-', starting and
ending alphanumeric; a long name keeps a readable prefix and gets a hash of the
full name, so two long names never collide by truncation.

Names of a run's children never collide across runs either: `<run>-<step>`
spells each '_' of the step id as '--', so the step is what follows the last
run of an odd number of '-' (a step id starts with a letter, a run name ends
with one or a digit). A run name with a '.' (which a DNS label cannot hold),
a step id ending in '_' (a label cannot end in '-') or a pair too long for
the limit gets a readable prefix and a hash of the exact pair, made of digits
only and after a single '-': a form the readable names never take.
"""

from __future__ import annotations

import hashlib
import re

from towline.api.loops import instance_id, instance_key, loop_of

MAX_NAME_LENGTH = 63
STEP_JOB_PREFIX = "towline-step-"
"""The start of every step Job's name, and so of every step pod's (the Job controller names a Job's pods
`<job>-<random>`, cutting the Job's name at 58 characters). The chart reserves it (admission policy
towline-step-objects): only the operator creates Jobs, and only the Job controller pods, named so, and
nobody may exec, attach or port-forward into such a pod. Exec and attach arrive at the API server with the
pod's name only, no labels: the name is what tells a step pod apart there."""
GATE_SUFFIX = "__approval"
"""Step ids ending in this are reserved for approval gates the policy inserts."""

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_HASH_LENGTH = 8
_DIGEST_DIGITS = 10


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
    """`towline-step-<run>-<step>-<attempt>`; the prefix and the attempt number always survive shortening."""
    suffix = f"-{attempt}"
    limit = MAX_NAME_LENGTH - len(STEP_JOB_PREFIX) - len(suffix)
    return STEP_JOB_PREFIX + run_step_label(run_name, step_id, limit=limit) + suffix


def notification_job_name(run_name: str, step_id: str, event: str, index: int) -> str:
    """`towline-step-<run>-<step>-notify<index>-<event>`: one Job per gate, notification entry and event.

    It ends in letters, where every step Job's name ends in its attempt number, so the two never collide.
    """
    suffix = f"-notify{index}-{event}"
    limit = MAX_NAME_LENGTH - len(STEP_JOB_PREFIX) - len(suffix)
    return STEP_JOB_PREFIX + run_step_label(run_name, step_id, limit=limit) + suffix


def approval_name(run_name: str, step_id: str) -> str:
    """`<run>-<step>`: one Approval per gate per run."""
    return run_step_label(run_name, step_id, limit=MAX_NAME_LENGTH)


def child_run_name(run_name: str, step_id: str) -> str:
    """`<run>-<step>`: a subflow step's child WorkflowRun (one per run and step; its own children's names are
    `<run>-<step>-<its step>`, which no step of this run can spell: step ids hold no '-')."""
    return run_step_label(run_name, step_id, limit=MAX_NAME_LENGTH)


def run_step_label(run_name: str, step_id: str, *, limit: int) -> str:
    """`<run>-<step>` (each '_' as '--') when it fits, else a readable prefix and a digits-only hash."""
    text = f"{run_name}-{step_id.replace('_', '--')}"
    # A loop instance's id (`deploy[0]`) holds brackets no name may: it always takes the hashed form.
    if "." not in run_name and not step_id.endswith("_") and "[" not in step_id and len(text) <= limit:
        return text
    # Digits only, so the last segment of a hashed name can never be a step id (those start with a letter).
    digest = str(int(hashlib.sha256(f"{run_name}/{step_id}".encode()).hexdigest()[:15], 16) % 10**_DIGEST_DIGITS)
    digest = digest.zfill(_DIGEST_DIGITS)
    prefix = dns_label(f"{run_name}-{step_id}")[: limit - _DIGEST_DIGITS - 1].rstrip("-")
    return f"{prefix}-{digest}"


def gate_id(step_id: str) -> str:
    """The id of the approval gate the policy inserts before `step_id`; a valid step identifier.

    A loop instance's gate is the same instance of the loop's gate: `deploy__approval[0]` before `deploy[0]`.
    """
    loop = loop_of(step_id)
    if loop is not None:
        return instance_id(gate_id(loop), instance_key(step_id) or "")
    candidate = step_id + GATE_SUFFIX
    if len(candidate) <= MAX_NAME_LENGTH:
        return candidate
    keep = MAX_NAME_LENGTH - len(GATE_SUFFIX) - _HASH_LENGTH - 1
    return f"{step_id[:keep]}_{short_hash(step_id)}{GATE_SUFFIX}"
