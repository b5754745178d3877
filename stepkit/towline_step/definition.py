"""The `@step` decorator: a typed function plus what Towline needs to register and run it as a StepType.

The function's input and output pydantic models are read from its type hints,
so the StepType's `inputs` and `outputs` JSON Schemas (towline_step.manifest)
and the checks `main()` applies (towline_step.runtime) come from one source and
cannot drift. Everything a manifest states is checked here, when the module is
imported, so a mistake is a clear error on the author's machine rather than a
StepType the API server or the operator refuses later.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from towline_step.extra import sdk_missing

try:
    from pydantic import BaseModel
except ModuleNotFoundError as missing:  # the step kit without its sdk extra
    raise sdk_missing(missing, "@step (towline_step.definition)") from missing

from towline_step.context import Context
from towline_step.protocol import CREDENTIAL_KEY_PATTERN, CREDENTIAL_SLOT_PATTERN
from towline_step.runtime import main as run_main

InputT = TypeVar("InputT", bound=BaseModel)
OutputT = TypeVar("OutputT", bound=BaseModel)

_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""A Kubernetes object name (DNS-1123 subdomain), at most 253 characters."""
_SLOT = re.compile(CREDENTIAL_SLOT_PATTERN)
_SECRET_KEY = re.compile(CREDENTIAL_KEY_PATTERN)


@dataclass(frozen=True)
class CredentialSlot:
    """A named credential the type needs; a workflow step binds it to a Secret that holds these keys."""

    name: str
    keys: tuple[str, ...]
    description: str = ""
    optional: bool = False
    """A workflow step may leave it unbound (the function then finds no value); else binding it is required."""


@dataclass(frozen=True)
class Step(Generic[InputT, OutputT]):
    """A step function and its StepType declaration. Calling it calls the function (for tests)."""

    function: Callable[[InputT, Context], OutputT]
    input_model: type[InputT]
    output_model: type[OutputT]
    name: str
    image: str
    description: str
    credentials: tuple[CredentialSlot, ...] = ()
    egress_ports: tuple[int, ...] = ()
    idempotency_key: bool = False
    """The step sends TOWLINE_IDEMPOTENCY_KEY with its change, so a retry of a mutating attempt is safe."""
    mutating: bool = True
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    timeout_seconds: int | None = None
    retry: Mapping[str, Any] | None = None
    resources: Mapping[str, Any] | None = None

    def __call__(self, inputs: InputT, ctx: Context) -> OutputT:
        return self.function(inputs, ctx)

    def declared_credentials(self) -> frozenset[tuple[str, str]]:
        return frozenset((slot.name, key) for slot in self.credentials for key in slot.keys)

    def main(self, environ: Mapping[str, str] | None = None) -> int:
        """Run as a step container: read the protocol's inputs, call the function, write the result; the exit code.

        Use it as `if __name__ == "__main__": raise SystemExit(my_step.main())`.
        """
        return run_main(self, environ)


def step(
    *,
    name: str,
    image: str,
    description: str = "",
    credentials: Mapping[str, Sequence[str]] | Sequence[CredentialSlot] = (),
    egress_ports: Sequence[int] = (),
    idempotency_key: bool = False,
    mutating: bool = True,
    command: Sequence[str] | None = None,
    args: Sequence[str] | None = None,
    timeout_seconds: int | None = None,
    retry: Mapping[str, Any] | None = None,
    resources: Mapping[str, Any] | None = None,
) -> Callable[[Callable[[InputT, Context], OutputT]], Step[InputT, OutputT]]:
    """Declare a function `(inputs: InputModel, ctx: Context) -> OutputModel` as a step type.

    `description` defaults to the function's docstring. `retry` and `resources`
    are the StepType's (the operator checks them); `credentials` maps each slot
    to the Secret keys it needs, or lists CredentialSlots with descriptions.
    """
    _check_name(name)
    if not image.strip() or any(character.isspace() for character in image):
        raise ValueError(f"@step(image=...) must be an image reference without spaces, not {image!r}")
    slots = _credential_slots(credentials)
    ports = _ports(egress_ports)
    if timeout_seconds is not None and (isinstance(timeout_seconds, bool) or timeout_seconds <= 0):
        raise ValueError(f"@step(timeout_seconds=...) must be a positive number of seconds, not {timeout_seconds!r}")

    def decorate(function: Callable[[InputT, Context], OutputT]) -> Step[InputT, OutputT]:
        input_model, output_model = _models(function)
        return Step(
            function=function, input_model=input_model, output_model=output_model, name=name, image=image,
            description=description or inspect.cleandoc(function.__doc__ or "").split("\n\n")[0].replace("\n", " "),
            credentials=slots, egress_ports=ports, idempotency_key=idempotency_key, mutating=mutating,
            command=None if command is None else tuple(command), args=None if args is None else tuple(args),
            timeout_seconds=timeout_seconds, retry=None if retry is None else dict(retry),
            resources=None if resources is None else dict(resources),
        )

    return decorate


def _check_name(name: str) -> None:
    if len(name) > 253 or not _NAME.fullmatch(name):
        raise ValueError(
            f"@step(name=...) must be a Kubernetes object name (lowercase letters, digits, '-' and '.'), not {name!r}"
        )


def _credential_slots(
    credentials: Mapping[str, Sequence[str]] | Sequence[CredentialSlot],
) -> tuple[CredentialSlot, ...]:
    pairs = (
        [(slot, keys, "", False) for slot, keys in credentials.items()] if isinstance(credentials, Mapping)
        else [(slot.name, slot.keys, slot.description, slot.optional) for slot in credentials]
    )
    slots = []
    for name, keys, description, optional in pairs:
        if isinstance(keys, str) or not keys:  # a bare string would otherwise become one key per letter
            raise ValueError(f"credential slot {name!r} must list the Secret keys it needs, e.g. ['token']")
        slots.append(CredentialSlot(name, tuple(keys), description, optional))
    names = [slot.name for slot in slots]
    for slot in slots:
        if not _SLOT.fullmatch(slot.name) or names.count(slot.name) > 1:
            raise ValueError(f"credential slot names are unique and match {CREDENTIAL_SLOT_PATTERN} (a step binds "
                             f"a slot under its name in credentials, so no -), not {slot.name!r}")
        for key in slot.keys:
            if not _SECRET_KEY.fullmatch(key) or key in {".", ".."} or len(key) > 253:
                raise ValueError(f"credential slot {slot.name!r}: {key!r} is not a Secret key name")
    return tuple(slots)


def _ports(ports: Sequence[int]) -> tuple[int, ...]:
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"@step(egress_ports=...) takes TCP port numbers 1-65535, not {port!r}")
    return tuple(sorted(set(ports)))


def _models(function: Callable[..., Any]) -> tuple[Any, Any]:
    """The input and output models from the function's hints; anything else is refused with the fix."""
    where = f"step function {getattr(function, '__qualname__', function)!r}"
    parameters = list(inspect.signature(function).parameters)
    if len(parameters) != 2:
        raise TypeError(f"{where} must take exactly (inputs, ctx), not {len(parameters)} parameters")
    hints = typing.get_type_hints(function)
    input_model, output_model = hints.get(parameters[0]), hints.get("return")
    for role, model in (("its first parameter", input_model), ("its return value", output_model)):
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"{where}: annotate {role} with a pydantic BaseModel subclass, not {model!r}")
    return input_model, output_model
