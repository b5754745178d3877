"""What the ingress answers: a refusal with its status and a reason a sender's operator can act on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    """Nothing was created; `status` is the HTTP status, `reason` a stable code, `message` says why."""

    status: int
    reason: str
    message: str
    retry_after: float | None = None
