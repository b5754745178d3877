"""The start-a-run form: fields built from a Workflow's declared params, and what a person typed read back.

Pure. The fields are the params `kubectl towline workflows show` lists (workflowviews.workflow_shown: name,
type, required, default, description). What the person typed is read as the param's declared type (a number
field's text becomes a number, an object or array field is JSON), then checked by the rule the operator
applies when the run starts (towline.engine.start.param_problems): a run the operator would refuse is
refused here, each problem at its field, before anything is created. An empty field is not given: the run
takes the Workflow's default (or is refused when the param is required).
"""

from __future__ import annotations

import json
import re
from typing import Any

from towline.api.workflow import Param
from towline.engine.start import param_problems
from towline.jsontypes import JSON
from towline.plugin.workflowviews import workflow_shown

CONTROLS = {"string": "text", "integer": "number", "number": "number", "boolean": "checkbox",
            "object": "json", "array": "json"}
"""How the page asks for each declared type."""
MAX_ANSWER = 64 * 1024
_INTEGER = re.compile(r"-?[0-9]+")
FORM_FIELD = "params"
RETRY_CHANGED = "workflowChanged"
"""A retry's option: rerun the failed steps under the Workflow as it is now (`retry --workflow-changed`)."""


def form_fields(workflow: JSON) -> list[JSON]:
    """The form's fields, in the Workflow's order: what the page draws."""
    return [{
        "name": param.name, "type": param.type, "control": CONTROLS.get(param.type, "text"),
        "required": param.required, "hasDefault": param.has_default and param.default is not None,
        "default": param.default, "description": param.description,
        "defaultText": _as_text(param.default) if param.has_default and param.default is not None else "",
    } for param in workflow_shown(workflow).params]


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _read(kind: str, answer: Any) -> tuple[Any, str | None]:
    """The typed value of one answer, or why it is not one (naming what to write)."""
    if not isinstance(answer, str) or kind == "string":
        return answer, None  # text for a string; a value the page sent typed: the operator's rule judges it
    text = answer.strip()
    if kind == "boolean":
        return (text == "true", None) if text in ("true", "false") else (None, "expected true or false")
    if kind == "integer":
        return (int(text), None) if _INTEGER.fullmatch(text) else (None, "expected a whole number, e.g. 30")
    try:
        return json.loads(text), None
    except ValueError:
        example = {"number": "2.5", "object": '{"key": "value"}', "array": '["a", "b"]'}.get(kind, '"text"')
        return None, f"expected {kind} as JSON, e.g. {example}"


def read_answers(workflow: JSON, body: Any) -> tuple[JSON, dict[str, str]]:
    """The run's spec.params from the form's answers (`{"params": {name: answer}}`), and each problem by field.

    A field that is empty (or absent) is not given. Problems keyed "" are about the form as a whole.
    """
    answers = body.get(FORM_FIELD) if isinstance(body, dict) else None
    if not isinstance(answers, dict):
        return {}, {"": f"send the answers as {{\"{FORM_FIELD}\": {{NAME: VALUE}}}}"}
    declared = _declared(workflow)
    supplied, problems = _typed_answers(declared, answers)
    _, checked = param_problems(declared, {k: v for k, v in supplied.items() if k not in problems})
    for name, message in checked:
        problems.setdefault(name, message)
    return supplied, problems


def read_retry(workflow: JSON | None, body: Any) -> tuple[bool, JSON, dict[str, str]]:
    """A retry's options from the run page, `{"workflowChanged": BOOLEAN, "params": {NAME: answer}}` (each
    optional), as `kubectl towline retry --workflow-changed -p NAME=VALUE` takes them: whether to rerun under the
    Workflow as it is now, the params to change (each answer read as its type in `workflow`, the Workflow now; an
    empty one keeps the run's value), and each problem by field. Whether the retry may do that is the retry
    plan's question (towline.plugin.retryplan), the CLI's and the view's alike.
    """
    if not isinstance(body, dict):
        shape = f'{{"{RETRY_CHANGED}": true, "{FORM_FIELD}": {{NAME: VALUE}}}}'
        return False, {}, {"": f"send a retry's options as {shape}"}
    problems: dict[str, str] = {}
    unknown = sorted(str(key) for key in body if key not in (RETRY_CHANGED, FORM_FIELD))
    if unknown:
        problems[""] = f"no retry option {', '.join(unknown)}: only {RETRY_CHANGED} and {FORM_FIELD}"
    changed = body.get(RETRY_CHANGED, False)
    if not isinstance(changed, bool):
        problems[RETRY_CHANGED] = f"{RETRY_CHANGED}: expected true or false"
    answers = body.get(FORM_FIELD) or {}
    if not isinstance(answers, dict):
        problems[FORM_FIELD] = f"{FORM_FIELD}: expected {{NAME: VALUE}}"
        answers = {}
    supplied, typed = _typed_answers(_declared(workflow or {}), answers)
    return changed is True, supplied, {**problems, **typed}


def _declared(workflow: JSON) -> list[Param]:
    return [Param.model_validate(p) for p in (workflow.get("spec") or {}).get("params") or []]


def _typed_answers(declared: list[Param], answers: JSON) -> tuple[JSON, dict[str, str]]:
    """Each non-empty answer as its param's declared type (text for an undeclared one), and each problem."""
    kinds = {param.name: param.type for param in declared}
    supplied: JSON = {}
    problems: dict[str, str] = {}
    for name, answer in answers.items():
        if answer is None or answer == "":
            continue
        if isinstance(answer, str) and len(answer) > MAX_ANSWER:
            problems[str(name)] = f"at most {MAX_ANSWER} characters"
            continue
        value, problem = _read(kinds.get(name, "string"), answer)
        if problem is not None:
            problems[str(name)] = f"{name}: {problem}"
        else:
            supplied[str(name)] = value
    return supplied, problems
