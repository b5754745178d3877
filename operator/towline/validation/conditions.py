"""A Workflow's conditions after validation, in the form kstatus, Flux and Argo CD read.

`Ready` says whether the spec is valid, with `observedGeneration` so tools know
the verdict is about the current generation. An invalid spec also gets
`Stalled=True`: kstatus (Flux's health checks) reports a resource as Failed
only through `Stalled`, and it will not heal until someone edits the spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from towline.api.common import Condition
from towline.api.workflow import ValidationError

READY = "Ready"
STALLED = "Stalled"
REASON_VALID = "Valid"
REASON_INVALID = "InvalidSpec"
_SHOWN = 5


def ready_condition(errors: Sequence[ValidationError], generation: int, now: datetime) -> Condition:
    """`Ready` True (reason Valid) or False (reason InvalidSpec, the first problems in the message)."""
    if not errors:
        return Condition(
            type=READY, status="True", reason=REASON_VALID, message="the workflow is valid",
            last_transition_time=now, observed_generation=generation,
        )
    return Condition(
        type=READY, status="False", reason=REASON_INVALID, message=summary(errors),
        last_transition_time=now, observed_generation=generation,
    )


def summary(errors: Sequence[ValidationError]) -> str:
    """`N problem(s): field: message; ...` with the first few, pointing at status.validationErrors."""
    count = len(errors)
    shown = "; ".join(f"{e.field}: {e.message}" for e in errors[:_SHOWN])
    more = f"; and {count - _SHOWN} more in status.validationErrors" if count > _SHOWN else ""
    return f"{count} problem{'s' if count != 1 else ''} in the spec: {shown}{more}"


def workflow_conditions(
    previous: Sequence[Condition], errors: Sequence[ValidationError], generation: int, now: datetime
) -> list[Condition]:
    """The new condition list: Ready (and Stalled while invalid); other types kept as they were.

    A condition's lastTransitionTime changes only when its status does (API conventions).
    """
    ready = ready_condition(errors, generation, now)
    wanted = [ready]
    if errors:
        wanted.append(Condition(
            type=STALLED, status="True", reason=REASON_INVALID, message=ready.message,
            last_transition_time=now, observed_generation=generation,
        ))
    return merge_conditions(previous, wanted, replaced={READY, STALLED})


def merge_conditions(
    previous: Sequence[Condition], wanted: Sequence[Condition], *, replaced: set[str]
) -> list[Condition]:
    """`previous` with the `replaced` types swapped for `wanted`; a lastTransitionTime moves only with the status."""
    by_type = {c.type: c for c in previous}
    result = [c for c in previous if c.type not in replaced]
    for condition in wanted:
        old = by_type.get(condition.type)
        unchanged = old is not None and old.status == condition.status
        result.append(
            condition.model_copy(update={"last_transition_time": old.last_transition_time})
            if old is not None and unchanged else condition
        )
    return result
