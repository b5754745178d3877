"""Read a Workflow's raw spec into the model, turning schema errors into messages for people.

The API server has already applied the CRD schema, so errors here are rare
(an older CRD, a hand-made object). Each names the field in the user's
spelling (`spec.steps[2].timeoutSeconds`) and never repeats the input value,
which might be a pasted credential.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from towline.api.workflow import ValidationError, WorkflowSpec

_REWORDED = {
    "missing": "is required",
    "extra_forbidden": "is not a field here; check the spelling (fields are camelCase, e.g. timeoutSeconds)",
}


def parse_workflow_spec(raw: Mapping[str, Any]) -> tuple[WorkflowSpec | None, list[ValidationError]]:
    """The parsed spec, or None and what is wrong with it."""
    try:
        return WorkflowSpec.model_validate(raw), []
    except PydanticValidationError as error:
        return None, [
            ValidationError(field=field_path(issue["loc"]), message=_message(issue))
            for issue in error.errors(include_input=False, include_url=False)
        ]


def field_path(loc: Sequence[int | str], root: str = "spec") -> str:
    """`('steps', 2, 'needs', 0)` -> `spec.steps[2].needs[0]`."""
    path = root
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part != "[key]":
            path += f".{part}"
    return path


def _message(issue: Mapping[str, Any]) -> str:
    loc = tuple(issue["loc"])
    if len(loc) >= 4 and loc[2] == "credentials" and loc[-1] != "[key]":
        alias = str(loc[3])
        secret = alias.replace("_", "-")
        return (
            f"must name a Secret in this namespace, never hold the credential itself; put the value in a Secret "
            f"and reference it by name: kubectl create secret generic {secret} --from-literal=token=... "
            f"then write credentials: {{{alias}: {secret}}}"
        )
    if loc and loc[-1] == "[key]":
        return f"{loc[-2]!r} is not a valid key here: {issue['msg']}"
    text = _REWORDED.get(issue["type"], str(issue["msg"]))
    return text.removeprefix("Value error, ")
