"""What the ingress answers: a refusal with its status and a reason a sender's operator can act on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    """Nothing was created; `status` is the HTTP status, `reason` a stable code, `message` says why.

    `detail`, when set, is what the ingress logs instead of `message`: the full story for the
    Workflow's author, where the answer to a caller not yet authenticated must say less.
    """

    status: int
    reason: str
    message: str
    retry_after: float | None = None
    detail: str | None = None


NOT_FOUND = "no webhook trigger that accepts deliveries at this path"


def not_found(detail: str) -> Refusal:
    """The one answer for every path that is not a usable webhook trigger: no workflow, no trigger, a schedule
    trigger, an invalid Workflow. A caller who has not yet shown a signature learns nothing more."""
    return Refusal(404, "NotFound", NOT_FOUND, detail=detail)
