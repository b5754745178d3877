"""The greeter step type, written with Towline's step kit: typed inputs in, a typed greeting out.

It exists to show the SDK and to let tests prove the step protocol end to end:
whether a credential was bound (it reports only that it had one, never the
value), the idempotency key it received, a raw TCP connect from inside its own
container (`connect`, for egress tests) and a failure of each kind on request
(`fail`). Run it as `python3 -m greeter` or `python3 greeter.py` in a step
container; `python -m towline_step.manifest greeter:greet` prints its StepType.
"""

from __future__ import annotations

import socket
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from towline_step import (
    AuthError,
    Context,
    CredentialSlot,
    PermanentError,
    RateLimitedError,
    TransientError,
    step,
)

CONNECT_TIMEOUT_SECONDS = 3.0
FailureMode = Literal["transient", "permanent", "rate_limit", "auth", "crash", "oversize"]


class Inputs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, description="Who to greet.")
    fail: FailureMode | None = Field(
        default=None,
        description="Fail this way instead of greeting (for tests): an error class, `crash` (an unexpected "
        "exception) or `oversize` (an output over the result limit).",
    )
    connect: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$",
        description="host:port to open a raw TCP connection to first (3 s timeout); the output says whether it "
        "connected. For egress tests: it bypasses any HTTP-level guard.",
    )


class Outputs(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    greeting: str = Field(description="The greeting.")
    idempotency_key: str | None = Field(description="The idempotency key this attempt received.")
    had_token: bool = Field(description="Whether credential slot `api` key `token` was bound (never its value).")
    connected: bool | None = Field(default=None, description="The `connect` result; null when none was asked.")
    connect_error: str | None = Field(default=None, description="Why the connect failed, when it did.")


@step(
    name="greeter",
    image="localhost/towline-steps/greeter:dev",
    credentials=[CredentialSlot("api", ("token",), "An API token; the greeter reports only whether it got one.",
                                optional=True)],
    egress_ports=[443],
    idempotency_key=True,
    mutating=False,
    timeout_seconds=60,
)
def greet(inputs: Inputs, ctx: Context) -> Outputs:
    """Greets someone, and reports what the step container was given and could reach."""
    connected, connect_error = (None, None) if inputs.connect is None else _connect(inputs.connect)
    _fail_if_asked(inputs.fail)
    token = ctx.optional_credential("api", "token")
    ctx.logger.info("greeting %s (token bound: %s)", inputs.name, token is not None)
    greeting = f"Hello, {inputs.name}!" * (4000 if inputs.fail == "oversize" else 1)
    return Outputs(greeting=greeting, idempotency_key=ctx.idempotency_key, had_token=token is not None,
                   connected=connected, connect_error=connect_error)


def _connect(target: str) -> tuple[bool, str | None]:
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_SECONDS):
            return True, None
    except OSError as error:
        return False, f"{type(error).__name__}: {error.strerror or error}"


def _fail_if_asked(mode: FailureMode | None) -> None:
    if mode == "transient":
        raise TransientError("asked to fail: transient (a retry may succeed)")
    if mode == "permanent":
        raise PermanentError("asked to fail: permanent")
    if mode == "rate_limit":
        raise RateLimitedError("asked to fail: rate limited", retry_after_seconds=5)
    if mode == "auth":
        raise AuthError("asked to fail: the credential was refused")
    if mode == "crash":
        raise RuntimeError("asked to crash")


if __name__ == "__main__":
    raise SystemExit(greet.main())
