"""The catalogue of built-in actions and the metadata questions the operator asks.

`validate_inputs` is what the operator's workflow validator calls: it checks
only what is literal in a step's `with:` (a `${{ ... }}` binding is accepted for
any field) and answers with messages naming the field and the fix. This module
must never run an action or touch the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from towline_connectors import ai, code_python, code_wasm, http, notify_email, notify_slack, transform, webhook
from towline_connectors.spec import (
    CONFIG_MAP_FILE_PATH,
    ActionSpec,
    CredentialRequirement,
    Destination,
    PodNeeds,
    RetryDefaults,
)
from towline_connectors.wire import is_template

__all__ = [
    "ACTIONS",
    "CONFIG_MAP_FILE_PATH",
    "ActionSpec",
    "CredentialRequirement",
    "Destination",
    "PodNeeds",
    "RetryDefaults",
    "format_validation_errors",
    "get_action",
    "json_schemas",
    "list_actions",
    "validate_inputs",
]

ACTIONS: Mapping[str, ActionSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            http.SPEC,
            webhook.SPEC,
            notify_slack.SPEC,
            notify_email.SPEC,
            ai.SPEC,
            transform.SPEC,
            code_python.SPEC,
            code_wasm.SPEC,
        )
    }
)


def get_action(name: str) -> ActionSpec | None:
    return ACTIONS.get(name)


def list_actions() -> list[ActionSpec]:
    return [ACTIONS[name] for name in sorted(ACTIONS)]


def validate_inputs(name: str, inputs: dict[str, Any]) -> list[str]:
    """Problems with a step's literal inputs, as messages naming the field and the fix."""
    spec = get_action(name)
    if spec is None:
        return [f"action {name!r} does not exist; use one of: {', '.join(sorted(ACTIONS))}"]
    if not isinstance(inputs, dict):
        return ["with: must be a mapping of input names to values"]
    try:
        spec.input_model.model_validate(inputs)
    except ValidationError as exc:
        errors = [e for e in exc.errors() if not _about_a_template(e, inputs)]
        return format_validation_errors(errors, spec.input_model)
    return []


def _about_a_template(error: ErrorDetails, inputs: dict[str, Any]) -> bool:
    """True when the error concerns a value that is, or sits inside, an unresolved binding.

    A misspelt input name is wrong whatever its value, so an unknown key holding a binding is still
    refused; only one inside a binding (whose keys are not known until run time) is not."""
    unknown_key = error["type"] == "extra_forbidden"
    if not unknown_key and is_template(error.get("input")):
        return True
    value: Any = inputs
    for part in error["loc"]:
        if is_template(value):
            return True
        value = _child(value, part)
    return not unknown_key and is_template(value)


def _child(value: Any, part: int | str) -> Any:
    if isinstance(value, dict):
        return value.get(part)
    if isinstance(value, list) and isinstance(part, int) and part < len(value):
        return value[part]
    return None


def format_validation_errors(errors: list[ErrorDetails], model: type[BaseModel]) -> list[str]:
    """pydantic errors rewritten as `with.<field>: <problem>; <fix>` lines."""
    messages = []
    for error in errors:
        path = _path(error["loc"])
        where = f"with.{path}" if path else "with"
        kind = error["type"]
        if kind == "missing":
            messages.append(f"{where}: required; add it")
        elif kind == "extra_forbidden":
            known = ", ".join(sorted(f.alias or n for n, f in model.model_fields.items()))
            field_name = path.rsplit(".", 1)[-1]
            hint = f" (fields: {known})" if "." not in path else ""
            messages.append(f"{where}: unknown field {field_name!r}; remove it or fix the spelling{hint}")
        else:
            text = error["msg"].removeprefix("Value error, ")
            messages.append(f"{where}: {text}")
    return messages


def _path(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def json_schemas() -> dict[str, Any]:
    """Input and output JSON Schemas of every action, for editors and `towline connectors --json`."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Towline connector actions",
        "description": "Inputs (a step's `with:`) and outputs of each action. Any string value may be a "
        "`${{ ... }}` binding, resolved before the step runs.",
        "actions": {
            spec.name: {
                "summary": spec.summary,
                "mutating": spec.mutating if spec.mutating_for is None else "depends on inputs",
                "idempotency": spec.idempotency,
                "credential": None
                if spec.credential is None
                else {
                    "type": spec.credential.type,
                    "requiredKeys": list(spec.credential.required_keys),
                    "optional": spec.credential.optional,
                },
                "input": spec.input_model.model_json_schema(by_alias=True, mode="validation"),
                "output": spec.output_model.model_json_schema(by_alias=True, mode="serialization"),
            }
            for spec in list_actions()
        },
    }
