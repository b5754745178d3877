"""What the validator needs to know about actions, and the adapter onto the connectors' registry.

The validator asks three questions of a catalog: which actions exist, whether
a step's inputs fit an action's schema, and whether an action mutates. Tests
pass a small fake; the operator passes `connector_catalog()`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import lru_cache
from types import ModuleType
from typing import Any, Protocol

from towline.api.workflow import RetryPolicy


class ActionCatalog(Protocol):
    """The actions a workflow may use, as far as validation is concerned."""

    def known_actions(self) -> list[str]:
        """Every action name, e.g. `http.request`, sorted."""
        ...

    def validate_inputs(self, action: str, inputs: Mapping[str, Any]) -> list[str]:
        """Messages naming the input field and the fix; empty when the inputs fit.

        `${{ }}` template strings count as valid for any field: they resolve at run time.
        """
        ...

    def is_mutating(self, action: str, inputs: Mapping[str, Any]) -> bool:
        """Whether running the action with these inputs changes something outside the pod."""
        ...

    def credential_refs(self, action: str, inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(alias, key) of every credential the action reads with these inputs, defaults included."""
        ...

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        """Hosts the action connects to as `inputs` are written; None for a host known only at run time."""
        ...


class ConnectorCatalog:
    """`ActionCatalog` over `towline_connectors.registry` (connector metadata only; nothing runs).

    It also answers what the engine and the NetworkPolicy builder ask of the
    same metadata (`default_retry`, `connector_ports`), so the operator holds one catalog.
    """

    def __init__(self, registry: ModuleType) -> None:
        self._registry = registry

    def known_actions(self) -> list[str]:
        return sorted(str(name) for name in self._registry.ACTIONS)

    def validate_inputs(self, action: str, inputs: Mapping[str, Any]) -> list[str]:
        return [str(message) for message in self._registry.validate_inputs(action, dict(inputs))]

    def is_mutating(self, action: str, inputs: Mapping[str, Any]) -> bool:
        spec = self._registry.get_action(action)
        return spec is None or bool(spec.is_mutating(inputs))

    def credential_refs(self, action: str, inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
        spec = self._registry.get_action(action)
        if spec is None:
            return []
        return [(str(alias), str(key)) for alias, key in spec.credential_refs(inputs)]

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        """Hosts the action connects to as `inputs` are written; None for a host known only at run time."""
        spec = self._registry.get_action(action)
        if spec is None:
            return []
        return [None if found.host is None else str(found.host) for found in spec.destinations(inputs)]

    def default_retry(self, action: str) -> RetryPolicy | None:
        """The retry policy a step of `action` gets when it sets none; None for unknown actions."""
        spec = self._registry.get_action(action)
        if spec is None:
            return None
        defaults = spec.default_retry
        return RetryPolicy(
            limit=defaults.limit, backoff=defaults.backoff, base_delay_seconds=defaults.base_delay_seconds,
            max_delay_seconds=defaults.max_delay_seconds, retry_on=list(defaults.retry_on),
        )

    def connector_ports(self, action: str, inputs: Mapping[str, Any]) -> list[int]:
        """TCP ports the action's declared destinations use (the step's NetworkPolicy opens them)."""
        spec = self._registry.get_action(action)
        if spec is None:
            return []
        return sorted({int(destination.port) for destination in spec.destinations(inputs)})


@lru_cache(maxsize=1)
def connector_catalog() -> ConnectorCatalog:
    """The catalog of the installed connectors; raises RuntimeError when they are missing.

    Imported lazily so the validation package loads (and its tests run)
    without the connectors.
    """
    try:
        registry = importlib.import_module("towline_connectors.registry")
    except ImportError as error:
        raise RuntimeError(
            f"the connector registry (towline_connectors.registry) cannot be imported: {error}; "
            "install the towline package with its connectors"
        ) from error
    return ConnectorCatalog(registry)
