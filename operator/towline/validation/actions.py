"""The questions validation and the engine ask about actions, as one protocol.

Kept apart from the adapter onto the connectors' registry (`catalog.py`) so the
rules that only need the questions (and the engine, which reuses their
messages) do not import every connector module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from towline.api.workflow import RetryPolicy


class ActionCatalog(Protocol):
    """The actions a workflow may use: what validation checks and the engine decides by (injected by the operator)."""

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

    def why_unavailable(self, action: str) -> str | None:
        """Why a user step type (`steptype/<name>`) cannot be used here, e.g. "is not registered"; None otherwise."""
        ...

    def credential_slots(self, action: str) -> list[str] | None:
        """The only credential aliases a step of `action` may bind (a user type's slots); None: any alias."""
        ...

    def is_code(self, action: str) -> bool:
        """Whether `action` runs the workflow author's own code (code.python, code.wasm)."""
        ...

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        """Hosts the action connects to as `inputs` are written; None for a host known only at run time."""
        ...

    def default_retry(self, action: str) -> RetryPolicy | None:
        """The retry policy of an action whose step sets none; None means no retries."""
        ...
