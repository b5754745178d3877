"""What the validator needs to know about actions, and the adapter onto the connectors' registry.

The validator asks three questions of a catalog: which actions exist, whether
a step's inputs fit an action's schema, and whether an action mutates. Tests
pass a small fake; the operator passes `connector_catalog()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from towline.api.workflow import RetryPolicy
from towline_connectors import registry
from towline_connectors.registry import CONFIG_MAP_FILE_PATH, PodNeeds

__all__ = ["CONFIG_MAP_FILE_PATH", "ConnectorCatalog", "PodNeeds", "connector_catalog"]


class ConnectorCatalog:
    """`ActionCatalog` over `towline_connectors.registry` (connector metadata only; nothing runs).

    It also answers what the engine and the NetworkPolicy builder ask of the
    same metadata (`default_retry`, `connector_ports`), so the operator holds one catalog.
    """

    def known_actions(self) -> list[str]:
        return sorted(registry.ACTIONS)

    def validate_inputs(self, action: str, inputs: Mapping[str, Any]) -> list[str]:
        return registry.validate_inputs(action, dict(inputs))

    def input_schemas(self) -> dict[str, dict[str, Any]]:
        """Each built-in action's `with` as JSON Schema (its input model's, camelCase names), for editors."""
        return {
            spec.name: spec.input_model.model_json_schema(by_alias=True, mode="validation")
            for spec in registry.list_actions()
        }

    def is_mutating(self, action: str, inputs: Mapping[str, Any]) -> bool:
        spec = registry.get_action(action)
        return spec is None or spec.is_mutating(inputs)

    def credential_refs(self, action: str, inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
        spec = registry.get_action(action)
        if spec is None:
            return []
        return list(spec.credential_refs(inputs))

    def why_unavailable(self, action: str) -> str | None:
        """Only user step types can be unavailable; the built-ins answer through `known_actions`."""
        return None

    def credential_slots(self, action: str) -> list[str] | None:
        """Built-ins read any alias a step declares (through `{credential: alias}` in `with`)."""
        return None

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        """Hosts the action connects to as `inputs` are written; None for a host known only at run time."""
        spec = registry.get_action(action)
        if spec is None:
            return []
        return [None if found.host is None else str(found.host) for found in spec.destinations(inputs)]

    def default_retry(self, action: str) -> RetryPolicy | None:
        """The retry policy a step of `action` gets when it sets none; None for unknown actions."""
        spec = registry.get_action(action)
        if spec is None:
            return None
        defaults = spec.default_retry
        return RetryPolicy(
            limit=defaults.limit, backoff=defaults.backoff, base_delay_seconds=defaults.base_delay_seconds,
            max_delay_seconds=defaults.max_delay_seconds, retry_on=list(defaults.retry_on),
        )

    def is_code(self, action: str) -> bool:
        """Whether the action runs the user's own code (code.python, code.wasm): off unless the chart enables it."""
        spec = registry.get_action(action)
        return spec is not None and spec.code

    def pod_needs(self, action: str, inputs: Mapping[str, Any]) -> PodNeeds:
        """The pod's limits, volume and user as the step's resolved inputs ask; defaults for other actions."""
        spec = registry.get_action(action)
        return PodNeeds() if spec is None else spec.pod_needs(inputs)

    def connector_ports(self, action: str, inputs: Mapping[str, Any]) -> list[int]:
        """TCP ports the action's declared destinations use (the step's NetworkPolicy opens them)."""
        spec = registry.get_action(action)
        if spec is None:
            return []
        return sorted({int(destination.port) for destination in spec.destinations(inputs)})


@lru_cache(maxsize=1)
def connector_catalog() -> ConnectorCatalog:
    """The catalog of the connectors that ship with the operator."""
    return ConnectorCatalog()
