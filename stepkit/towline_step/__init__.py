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
"""

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
