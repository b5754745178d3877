"""What any step's code gets besides its inputs, whoever runs it: the attempt's deadline, key and credentials.

Two things run a step's code and hand it this view of its attempt: the step
kit's SDK in a step type's own image (towline_step.context.Context) and
Towline's runner for a built-in action (towline_connectors.context.ActionContext,
which adds the network guard and the HTTP client). Both are a StepContext, so
the deadline arithmetic lives here once and a helper written against this base
serves either. Standard library only (the runner imports it); it must never
read a credential itself or log one: its implementations hold the values.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

# Never let a computed timeout reach zero: zero means "non-blocking" to sockets.
_MIN_TIMEOUT_SECONDS = 0.05


@dataclass(frozen=True)
class Deadline:
    """When the attempt's code must be finished, on a monotonic clock (time.monotonic unless a test passes one)."""

    expires_at: float
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(clock() + seconds, clock)

    def remaining(self) -> float:
        return max(0.0, self.expires_at - self.clock())

    def clamp(self, preferred: float) -> float:
        """A per-call timeout that never outlives the deadline."""
        return max(_MIN_TIMEOUT_SECONDS, min(preferred, self.remaining()))


class StepContext(ABC):
    """One attempt as its code sees it: the idempotency key, the deadline, the credentials bound to the step."""

    idempotency_key: str | None
    """The same for every attempt of one attempt group; None when Towline gave none (a local run)."""
    deadline: Deadline | None
    """None: no deadline (a local run without a budget)."""

    def remaining_seconds(self) -> float | None:
        """Seconds left before the attempt's code is stopped; None: no deadline."""
        return None if self.deadline is None else self.deadline.remaining()

    @abstractmethod
    def optional_credential(self, slot: str, key: str) -> str | None:
        """The value of the credential key bound as `slot` (the runner's alias), or None when it is not bound."""
