"""What a step function gets besides its inputs: credentials, the idempotency key, its deadline, its hosts.

The values come from the step protocol's environment and files (see
towline_step.protocol for the names). Credentials are read from their files
once, before the step function runs, and every value is registered with the
redactor as it is read, so nothing the step prints through Python's streams or
logging can carry one. This module never logs or returns a value except to the
step function that asks for it by slot and key.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from towline_step.attempt import Deadline, StepContext
from towline_step.errors import AuthError, InvalidInputError, PermanentError, TransientError
from towline_step.protocol import (
    ALLOW_HOSTS_ENV,
    DEADLINE_SECONDS_ENV,
    IDEMPOTENCY_KEY_ENV,
    PROTOCOL_VERSION,
    PROTOCOL_VERSION_ENV,
    STEP_TYPE_ENV,
    credentials_dir_from,
    inputs_path_from,
    result_path_from,
    step_environment,
)
from towline_step.redact import Redactor

CredentialKey = tuple[str, str]
"""(slot, key), e.g. ("api", "token"): the file <credentials dir>/api/token."""


@dataclass(frozen=True)
class StepEnvironment:
    """The step protocol's environment, read and checked; paths default to where the pod puts them."""

    inputs_path: Path
    credentials_dir: Path
    result_path: Path
    idempotency_key: str | None = None
    deadline_seconds: float | None = None
    allow_hosts: tuple[str, ...] = ()
    step_type: str | None = None

    def environ(self) -> dict[str, str]:
        """The variables that say this to a step's container (what read_environment reads back), unset ones left out."""
        return step_environment(
            allow_hosts=self.allow_hosts, inputs_path=str(self.inputs_path), credentials_dir=str(self.credentials_dir),
            result_path=str(self.result_path), idempotency_key=self.idempotency_key, step_type=self.step_type,
            deadline_seconds=self.deadline_seconds)


def read_environment(environ: Mapping[str, str]) -> StepEnvironment:
    """The environment as the SDK understands it; a malformed variable is a validation failure naming it."""
    version = environ.get(PROTOCOL_VERSION_ENV, "").strip()
    if version and version != str(PROTOCOL_VERSION):
        raise InvalidInputError(
            f"{PROTOCOL_VERSION_ENV} is {version[:16]!r}, but this step kit speaks step protocol "
            f"{PROTOCOL_VERSION}; rebuild the step's image with a step kit that speaks {version[:16]}"
        )
    deadline: float | None = None
    raw_deadline = environ.get(DEADLINE_SECONDS_ENV, "").strip()
    if raw_deadline:
        try:
            deadline = float(raw_deadline)
        except ValueError:
            deadline = -1.0
        if not 0 < deadline < float("inf"):
            raise InvalidInputError(
                f"{DEADLINE_SECONDS_ENV} must be a positive number of seconds, not {raw_deadline[:32]!r}"
            )
    return StepEnvironment(
        inputs_path=inputs_path_from(environ),
        credentials_dir=credentials_dir_from(environ),
        result_path=result_path_from(environ),
        idempotency_key=environ.get(IDEMPOTENCY_KEY_ENV) or None,
        deadline_seconds=deadline,
        allow_hosts=_allow_hosts(environ.get(ALLOW_HOSTS_ENV, "")),
        step_type=environ.get(STEP_TYPE_ENV) or None,
    )


def _allow_hosts(text: str) -> tuple[str, ...]:
    if not text.strip():
        return ()
    try:
        hosts = json.loads(text)
    except ValueError:
        hosts = None
    if not isinstance(hosts, list) or not all(isinstance(host, str) for host in hosts):
        raise InvalidInputError(f'{ALLOW_HOSTS_ENV} must be a JSON list of host names, like ["api.example.com"]')
    return tuple(hosts)


def load_credentials(directory: Path, redactor: Redactor) -> dict[CredentialKey, str]:
    """Every `<slot>/<key>` file under the directory, each value registered with the redactor as it is read.

    Kubernetes' own entries in a Secret volume (`..data` and its timestamped
    directories) are skipped; no directory means no credentials were bound.
    """
    found: dict[CredentialKey, str] = {}
    if not directory.is_dir():
        return found
    for slot_dir in sorted(directory.iterdir()):
        if slot_dir.name.startswith(".") or not slot_dir.is_dir():
            continue
        for key_file in sorted(slot_dir.iterdir()):
            if key_file.name.startswith(".") or not key_file.is_file():
                continue
            try:
                value = key_file.read_bytes().decode("utf-8", "surrogateescape")
            except OSError as error:
                raise TransientError(
                    f"could not read credential {slot_dir.name}/{key_file.name}: {error.strerror}"
                ) from None
            redactor.add(value)
            found[slot_dir.name, key_file.name] = value
    return found


class Context(StepContext):
    """The step function's view of its attempt. Built by the SDK; a test may build one directly.

    Its deadline is the one the SDK stops the step function at (the attempt's, less a margin).
    """

    def __init__(
        self,
        *,
        credentials: Mapping[CredentialKey, str] | None = None,
        declared: Collection[CredentialKey] | None = None,
        idempotency_key: str | None = None,
        budget_seconds: float | None = None,
        allow_hosts: tuple[str, ...] = (),
        step_type: str | None = None,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._credentials = dict(credentials or {})
        self._declared = None if declared is None else frozenset(declared)
        self.idempotency_key = idempotency_key
        self.allow_hosts = allow_hosts
        """The hosts the step's egress policy lets it reach (its `allowHosts`), on the type's egress ports."""
        self.step_type = step_type
        """`steptype/<name>` or `clustersteptype/<name>`, as registered."""
        self.logger = logger or logging.getLogger("towline_step")
        self.deadline = None if budget_seconds is None else Deadline.after(budget_seconds, clock)
        self._usage: dict[str, int | float] = {}

    def credential(self, slot: str, key: str) -> str:
        """The value of a bound credential key; an unbound one is an `auth` failure naming the fix."""
        value = self.optional_credential(slot, key)
        if value is None:
            raise AuthError(
                f"credential slot {slot!r} has no key {key!r} mounted: bind the slot to a Secret holding that "
                f"key in the workflow step's `credentials: {{{slot}: <secret-name>}}`"
            )
        return value

    def optional_credential(self, slot: str, key: str) -> str | None:
        """The value of a credential key, or None when the workflow step did not bind that slot."""
        if self._declared is not None and (slot, key) not in self._declared:
            raise PermanentError(
                f"the step reads credential {slot}/{key}, which its @step(credentials=...) does not declare; "
                "declare it so the StepType asks for it"
            )
        return self._credentials.get((slot, key))

    def record_usage(self, name: str, value: int | float) -> None:
        """Report a number in the result's `usage` (tokens, rows, bytes), added to what was recorded before."""
        self._usage[name] = self._usage.get(name, 0) + value

    @property
    def usage(self) -> dict[str, int | float]:
        return dict(self._usage)
