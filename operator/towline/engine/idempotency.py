"""Idempotency keys for mutating step attempts.

A key is derived only from the workflow, the run's UID, the step and its
attempt group, so it is the same after any number of operator restarts. It
stays the same across automatic retries (a retried POST is deduplicated by the
provider) and changes only when a person explicitly replays the step (the
attempt group is bumped), because then a second effect is what they asked for.
"""

from __future__ import annotations

import hashlib

KEY_PREFIX = "tl-"
_KEY_HEX_LENGTH = 40


def idempotency_key(workflow: str, run_uid: str, step_id: str, attempt_group: int) -> str:
    digest = hashlib.sha256(f"{workflow}/{run_uid}/{step_id}/{attempt_group}".encode()).hexdigest()
    return KEY_PREFIX + digest[:_KEY_HEX_LENGTH]
