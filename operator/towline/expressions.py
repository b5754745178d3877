"""CEL for `when` conditions and `${{ ... }}` input bindings. Never `eval`.

One expression language for everything a workflow computes, evaluated over
`params`, `steps.<id>.output`, `trigger` and `run`. Programs are compiled once
per distinct source text (an LRU cache), so a workflow generation's
expressions compile once, not on every evaluation.

Pure: no I/O, no clock. Errors a user can cause come back as
`ExpressionError` with a message meant for a person.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from towline.expression_cost import STRING_LITERAL, runtime_cost_problem, static_cost_problem
from towline_connectors.cellib import cel
from towline_connectors.wire import to_json_value

TEMPLATE = re.compile(r"\$\{\{(.*?)\}\}", re.S)
"""A `${{ expression }}` binding inside a string."""

_STEP_REFERENCE = re.compile(r"\bsteps\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)|\bsteps\s*\[\s*['\"]([^'\"]+)['\"]\s*\]")

ROOT_VARIABLES = frozenset({"params", "steps", "trigger", "run"})

OUTPUT_ROOTS = frozenset({"params", "steps"})
"""What a Workflow's spec.outputs may read: nothing of the trigger or the run."""


class ExpressionError(ValueError):
    """A CEL expression that does not compile or cannot be evaluated; the message says why."""


@lru_cache(maxsize=4096)
def compile_expression(source: str) -> Any:
    """Compile once per distinct source; raises ExpressionError with CEL's positioned message."""
    problem = static_cost_problem(source)
    if problem is not None:
        raise ExpressionError(problem)
    try:
        return cel.compile(source)
    except ValueError as error:
        raise ExpressionError(str(error)) from None


def condition_source(when: str) -> str:
    """`when` (and an output) is plain CEL; a whole-string `${{ }}` around it is accepted too."""
    text = when.strip()
    whole = TEMPLATE.match(text)
    return whole.group(1).strip() if whole is not None and whole.end() == len(text) else when


def syntax_error(source: str) -> str | None:
    """The compile error of `source`, or None when it compiles."""
    try:
        compile_expression(source)
    except ExpressionError as error:
        return str(error)
    return None


def unknown_variables(source: str, roots: frozenset[str] = ROOT_VARIABLES) -> set[str]:
    """Top-level names the expression reads that are not one of `roots` (params/steps/trigger/run).

    Macro variables (`x` in `list.exists(x, ...)`) are reported by the library
    too; callers decide whether a name is a macro variable (see `referenced_steps`).
    """
    program = compile_expression(source)
    names: list[str] = program.references()["variables"]
    macro_vars = set(re.findall(r"\.\s*(?:all|exists|exists_one|filter|map)\s*\(\s*([A-Za-z_]\w*)\s*,", source))
    return {n for n in names if n not in roots and n not in macro_vars}


def referenced_steps(source: str) -> set[str]:
    """Ids of steps an expression reads through `steps.<id>` or `steps['<id>']`.

    CEL's static analysis reports only the root variable, so the step ids are
    read from the source text with string literals blanked out first.
    """
    code = STRING_LITERAL.sub("''", source)
    found = set()
    for dotted, indexed in _STEP_REFERENCE.findall(code):
        found.add(dotted or indexed)
    # steps['id'] lives inside a literal we blanked; read those from the original text.
    for match in re.finditer(r"\bsteps\s*\[\s*['\"]([^'\"]+)['\"]\s*\]", source):
        found.add(match.group(1))
    found.discard("")
    return found


def string_leaves(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string inside a nested value, with the field path it sits at (`a.b[2].c`)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from string_leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from string_leaves(item, f"{path}[{index}]")


def template_expressions(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every `${{ }}` expression inside a nested value, with the field path it sits at."""
    for where, text in string_leaves(value, path):
        for match in TEMPLATE.finditer(text):
            yield where, match.group(1).strip()


def evaluate(source: str, context: Mapping[str, Any]) -> Any:
    """Evaluate one CEL expression over `context`; missing fields are a clear error."""
    program = compile_expression(source)
    problem = runtime_cost_problem(source, context)
    if problem is not None:
        raise ExpressionError(f"{source[:200]!r}: {problem}")
    try:
        return to_json_value(program.execute(dict(context)))
    except KeyError as error:
        raise ExpressionError(f"{source!r}: no such field or key {error.args[0]!r}") from None
    except (ValueError, TypeError, ZeroDivisionError, OverflowError, RuntimeError) as error:
        raise ExpressionError(f"{source!r}: {error}") from None


def evaluate_condition(source: str, context: Mapping[str, Any]) -> bool:
    """A `when` condition must yield a boolean; anything else is the author's error."""
    result = evaluate(source, context)
    if not isinstance(result, bool):
        raise ExpressionError(f"{source!r} must evaluate to true or false, got {type(result).__name__}")
    return result


def render(value: Any, context: Mapping[str, Any]) -> Any:
    """Resolve `${{ }}` bindings in a nested value.

    A string that is exactly one binding takes the expression's own type (so
    `json: "${{ steps.a.output.items }}"` passes a list); a binding inside a
    longer string is interpolated as text.
    """
    if isinstance(value, str):
        # `match` + end, not `fullmatch`: the lazy pattern would fullmatch "${{ a }} ${{ b }}" as one binding.
        whole = TEMPLATE.match(value.strip())
        if whole is not None and whole.end() == len(value.strip()):
            return evaluate(whole.group(1).strip(), context)
        return _interpolate(value, context)
    if isinstance(value, Mapping):
        return {key: render(item, context) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item, context) for item in value]
    return value


def _interpolate(template: str, context: Mapping[str, Any]) -> str:
    """Bindings inside a longer string, as text; inside a URL's path or query, percent-encoded."""
    parts: list[str] = []
    last = 0
    for match in TEMPLATE.finditer(template):
        text = _as_text(evaluate(match.group(1).strip(), context))
        shape = TEMPLATE.sub("x", template[: match.start()])
        if _URL_AFTER_AUTHORITY.match(shape):
            text = url_component(text, in_path=not any(mark in shape for mark in "?#"), url=template)
        parts += [template[last:match.start()], text]
        last = match.end()
    parts.append(template[last:])
    return "".join(parts)


# A URL whose authority has ended: what follows is path, query or fragment.
_URL_AFTER_AUTHORITY = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#]*[/?#]\S*$")


def url_component(value: str, *, in_path: bool, url: str) -> str:
    """A bound value as one percent-encoded URL component: it can never add a path segment or a parameter.

    `..` and `.` alone would still be a dot segment that climbs out of the
    intended path once a client or server normalises the URL, so they are refused.
    """
    if in_path and value in (".", ".."):
        raise ExpressionError(
            f"{url!r}: a value bound into the URL path is {value!r}, which would leave the intended path; "
            "check the input that supplies it"
        )
    return urllib.parse.quote(value, safe="")


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)

