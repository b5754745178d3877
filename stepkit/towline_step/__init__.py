"""Towline's step kit: the step protocol, and a small SDK to write a step type as a typed Python function.

    from pydantic import BaseModel
    from towline_step import Context, step

    class Inputs(BaseModel):
        name: str

    class Outputs(BaseModel):
        greeting: str

    @step(name="greeter", image="registry.example/greeter:1", mutating=False)
    def greet(inputs: Inputs, ctx: Context) -> Outputs:
        return Outputs(greeting=f"Hello, {inputs.name}")

    if __name__ == "__main__":
        raise SystemExit(greet.main())

`towline_step.protocol` (standard library only) is the contract itself, shared
with the operator and the runner; `python -m towline_step.manifest` prints the
StepType for a decorated function, `python -m towline_step.harness` runs a step
locally. docs/step-protocol.md describes the protocol for any language. This
package never imports the operator or the connectors: a step type's image holds
it alone.

The SDK (`step`, `Step`, `CredentialSlot`, `Context` and the errors) needs
pydantic and PyYAML, the `sdk` extra (`pip install 'towline-step[sdk]'`). Its
names are imported when first used (PEP 562), so `import towline_step.protocol`,
and a step written against the protocol alone, need nothing but the standard
library; using the SDK without the extra is an ImportError naming it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from towline_step.context import Context
    from towline_step.definition import CredentialSlot, Step, step
    from towline_step.errors import (
        AuthError,
        InvalidInputError,
        PermanentError,
        RateLimitedError,
        StepError,
        TransientError,
        UnknownSideEffectError,
    )

__all__ = [
    "AuthError",
    "Context",
    "CredentialSlot",
    "InvalidInputError",
    "PermanentError",
    "RateLimitedError",
    "Step",
    "StepError",
    "TransientError",
    "UnknownSideEffectError",
    "step",
]

_HOMES = {
    "Context": "towline_step.context",
    "CredentialSlot": "towline_step.definition",
    "Step": "towline_step.definition",
    "step": "towline_step.definition",
    **dict.fromkeys(("AuthError", "InvalidInputError", "PermanentError", "RateLimitedError", "StepError",
                     "TransientError", "UnknownSideEffectError"), "towline_step.errors"),
}
"""Each public name and the module that defines it, imported on first use (an SDK module without the sdk extra
raises the ImportError towline_step.extra words)."""


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'towline_step' has no attribute {name!r}")
    value: object = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
