"""What an action declares about itself: the metadata the operator reads.

The operator validates workflows and writes NetworkPolicies from these
declarations without running anything, so every question here (does it
mutate? where does it connect?) is answered from the step's inputs alone.
This module must never touch the network or read credentials.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from towline_connectors.context import ActionContext
from towline_connectors.models import PASSWORD_KEY, USERNAME_KEY
from towline_connectors.wire import is_template

# How an action avoids doing a side effect twice when it is replayed.
IDEMPOTENCY_KEY_HEADER = "key-header"  # sends the step's key (Idempotency-Key, webhook-id)
IDEMPOTENCY_NATURAL = "natural"  # replaying it has no further effect
IDEMPOTENCY_NONE = "none"  # a replay may repeat the effect


@dataclass(frozen=True)
class CredentialRequirement:
    """The kind of Secret an action expects and the keys it reads by default."""

    type: str
    required_keys: tuple[str, ...]
    optional: bool = False


@dataclass(frozen=True)
class RetryDefaults:
    """The retry policy a step gets when it does not set its own."""

    limit: int
    base_delay_seconds: float
    max_delay_seconds: float
    backoff: Literal["exponential", "fixed"] = "exponential"
    retry_on: tuple[str, ...] = ("transient", "rate_limit", "timeout")
    """What is worth trying again by default: the provider may answer differently next time."""


NOT_RETRIED = RetryDefaults(limit=0, base_delay_seconds=0.0, max_delay_seconds=0.0, backoff="fixed", retry_on=())
"""An action whose next attempt would do exactly what this one did (a pure computation): one attempt."""


@dataclass(frozen=True)
class Destination:
    """Where an action connects; `host=None` means only known at run time."""

    host: str | None
    port: int


@dataclass(frozen=True)
class ActionResult:
    """What a successful action returns: its output and, for metered APIs, usage."""

    output: BaseModel | Any
    usage: dict[str, Any] | None = None


Inputs = Mapping[str, Any]
RunFunction = Callable[[Any, ActionContext], Awaitable[ActionResult]]


@dataclass(frozen=True)
class PodNeeds:
    """What a step's pod needs beyond the built-in defaults, read from its inputs (code steps declare these)."""

    memory_limit_bytes: int | None = None
    """The container's memory limit; None: the built-in default."""
    cpu_limit: str | None = None
    """The container's CPU limit as a Kubernetes quantity (`500m`, `2`); None: none."""
    config_map_file: tuple[str, str] | None = None
    """(ConfigMap name, key) mounted read-only as the one file CONFIG_MAP_FILE_PATH, e.g. a WebAssembly module."""
    own_user: bool = False
    """Run as a user id of its own: a process limit then counts only this pod's processes, not every step's."""


CONFIG_MAP_FILE_PATH = "/var/run/towline/code/module"
"""Where the pod finds its `PodNeeds.config_map_file`."""


def no_destinations(_inputs: Inputs) -> list[Destination]:
    return []


def no_pod_needs(_inputs: Inputs) -> PodNeeds:
    return PodNeeds()


@dataclass(frozen=True)
class ActionSpec:
    """One action: schemas, behaviour declarations and the function that runs it.

    What an action does not declare is read the cautious way round: it needs no credential, it may change
    something outside the pod, a replay may repeat that change, and a failed attempt is not tried again. One
    that changes nothing (`mutating=False`) is naturally idempotent unless it says otherwise.
    """

    name: str
    summary: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    run: RunFunction
    credential: CredentialRequirement | None = None
    mutating: bool = True
    idempotency: str = ""
    """IDEMPOTENCY_*; left out: IDEMPOTENCY_NONE for a mutating action, IDEMPOTENCY_NATURAL for one that is not."""
    default_retry: RetryDefaults = NOT_RETRIED
    rate_limit_hint: str | None = None
    # Told to a user whose output exceeded the termination-message limit.
    shrink_hint: str = "return less data from this step"
    mutating_for: Callable[[Inputs], bool] | None = None
    destinations_for: Callable[[Inputs], list[Destination]] = field(default=no_destinations)
    credential_refs_for: Callable[[Inputs], list[tuple[str, str]]] | None = None
    pod_needs_for: Callable[[Inputs], PodNeeds] = field(default=no_pod_needs)
    code: bool = False
    """Runs the user's own code (code.python, code.wasm): off unless the cluster admin enables code steps."""

    def __post_init__(self) -> None:
        if not self.idempotency:
            object.__setattr__(self, "idempotency", IDEMPOTENCY_NONE if self.mutating else IDEMPOTENCY_NATURAL)

    def is_mutating(self, inputs: Inputs) -> bool:
        """Whether running with these inputs changes something outside the pod."""
        return self.mutating_for(inputs) if self.mutating_for is not None else self.mutating

    def pod_needs(self, inputs: Inputs) -> PodNeeds:
        """The pod's limits, volumes and user as these inputs ask (never fails: unreadable inputs get defaults)."""
        return self.pod_needs_for(inputs)

    def destinations(self, inputs: Inputs) -> list[Destination]:
        """Hosts and ports this step will connect to, derived without network access."""
        return self.destinations_for(inputs)

    def credential_refs(self, inputs: Inputs) -> list[tuple[str, str]]:
        """(alias, key) pairs these inputs read, defaults included.

        The step's pod mounts exactly these keys, so a default the inputs leave out (webhook.send's
        `{credential: webhook, key: signing-secret}`) must be here: inputs that fit the action's
        model are read through it, defaults filled in.
        """
        if self.credential_refs_for is not None:
            return self.credential_refs_for(inputs)
        found = find_credential_refs(inputs)
        try:
            model = self.input_model.model_validate(dict(inputs))
        except (ValidationError, TypeError, ValueError):
            return found
        return list(dict.fromkeys([*found, *find_credential_refs(model.model_dump(by_alias=True))]))


def find_credential_refs(value: Any) -> list[tuple[str, str]]:
    """Every `{credential: alias, key|usernameKey|passwordKey: ...}` in literal inputs."""
    found: list[tuple[str, str]] = []
    if isinstance(value, Mapping):
        alias = value.get("credential")
        if isinstance(alias, str):
            if isinstance(value.get("key"), str):
                found.append((alias, value["key"]))
            if "key" not in value:
                found.append((alias, str(value.get("usernameKey", USERNAME_KEY))))
                found.append((alias, str(value.get("passwordKey", PASSWORD_KEY))))
        for item in value.values():
            found.extend(find_credential_refs(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(find_credential_refs(item))
    return found


def url_input_destinations(name: str) -> Callable[[Inputs], list[Destination]]:
    """`destinations_for` of an action that connects to the URL in its input `name` (see url_destination)."""

    def destinations(inputs: Inputs) -> list[Destination]:
        return url_destination(inputs.get(name))

    return destinations


def url_destination(url: object) -> list[Destination]:
    """The host and port of a literal URL; unknown parts of a templated one become None.

    A templated authority could be anything, so both web ports are declared.
    """
    if not isinstance(url, str):
        return [Destination(None, 443), Destination(None, 80)]
    scheme, _, rest = url.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    scheme_port = {"https": 443, "http": 80}.get(scheme.lower())
    if is_template(scheme) or scheme_port is None or is_template(authority):
        return [Destination(None, 443), Destination(None, 80)]
    parsed = urllib.parse.urlsplit(f"{scheme}://{authority}")
    try:
        port = parsed.port or scheme_port
    except ValueError:
        return [Destination(parsed.hostname, scheme_port)]
    return [Destination(parsed.hostname, port)]
