"""Step types' JSON Schemas, checked and evaluated so that no schema or input can reach a file, a URL or the CPU.

A type's schemas are written by whoever may register a StepType, and they are evaluated by the operator,
which serves every namespace: one schema must never stall or kill it. So, here and nowhere else:

- a `$ref` / `$dynamicRef` must point inside its schema (`#...`), and the validators get an empty
  `referencing` registry: jsonschema's default follows any other reference with a blocking `urlopen`
  (`file:///dev/zero`, a tarpit URL), and with this registry such a reference is unresolvable, never fetched;
- `pattern` and `patternProperties` run on RE2, whose matching time is linear in the input, never on
  Python's backtracking `re` (`^(a+)+$` against 40 characters takes days); a pattern must compile on RE2;
- a schema is at most MAX_SCHEMA_DEPTH levels deep and MAX_SCHEMA_VALUES values big, and one check spends
  at most MAX_CHECK_STEPS keyword evaluations: references inside a schema can share subschemas, so a small
  schema can still ask for exponential work;
- `uniqueItems` compares items by hash, not pairwise.

Nothing here raises on a hostile schema or input: every problem is a message naming the field and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.exceptions import ValidationError as SchemaViolation
from referencing import Registry
from referencing.exceptions import Unresolvable

MAX_SCHEMA_DEPTH = 32
"""Deepest nesting of objects and lists in one schema (the admission policy refuses deeper ones first)."""
MAX_SCHEMA_ITEMS = 256
"""Most entries of any one object or list in a schema (also refused at admission)."""
MAX_SCHEMA_VALUES = 4096
"""Most values (objects, lists and scalars) in one schema."""
MAX_PATTERN_LENGTH = 1024
"""Longest `pattern` or `patternProperties` key."""
MAX_CHECK_STEPS = 10_000
"""Keyword evaluations one check of a value against a schema may spend: 50 to 170 ms of one core at worst."""
MAX_PASS_STEPS = 40_000
"""Keyword evaluations all checks of one pass may spend together (one Workflow's validation, one run's pass)."""

ADVICE_REF = ("only references inside the same schema are allowed: put the referenced schema under $defs and "
              "refer to it as #/$defs/<name>")
ADVICE_PATTERN = ("patterns run on RE2 (linear time): no backreferences (\\1) or lookarounds ((?=...), (?!...)); "
                  "rewrite it without them")


class _TooCostlyError(Exception):
    """A check, or the pass it belongs to, spent its budget of keyword evaluations."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


class _UnrunnablePatternError(Exception):
    """A pattern RE2 cannot compile reached evaluation (a type stored before it was checked)."""


@dataclass
class _Budget:
    limit: int
    left: int


_budgets: ContextVar[tuple[_Budget, ...]] = ContextVar("towline_schema_budgets", default=())


@contextmanager
def bounded_schema_work(steps: int = MAX_PASS_STEPS) -> Iterator[None]:
    """Caps the schema checks of one pass together (a Workflow's validation, a run's pass), each check still
    within MAX_CHECK_STEPS: a thousand steps naming one type must not multiply the work by a thousand."""
    token = _budgets.set((*_budgets.get(), _Budget(steps, steps)))
    try:
        yield
    finally:
        _budgets.reset(token)


def schema_problems(field: str, schema: Any) -> list[str]:
    """Why `schema` (found at `field`) may not be evaluated by the operator, each naming where and the fix."""
    shape = _shape_problem(field, schema)
    if shape is not None:
        return [shape]
    problems: list[str] = []
    keywords: set[str] = set()
    for where, node in _subschemas(field, schema):
        keywords.update(node)
        for keyword in ("$ref", "$dynamicRef"):
            target = node.get(keyword)
            if isinstance(target, str) and not target.startswith("#"):
                problems.append(f"{where}.{keyword}: {_clip(target)!r} points outside the schema; {ADVICE_REF}")
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            problems.extend(_pattern_problem(f"{where}.pattern", pattern))
        properties = node.get("patternProperties")
        if isinstance(properties, Mapping):
            for key in properties:
                problems.extend(_pattern_problem(f"{where}.patternProperties[{_clip(str(key))!r}]", str(key)))
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        problems.append(f"{field}: unevaluatedProperties cannot be combined with patternProperties in a step type's "
                        "schema; use additionalProperties next to the patternProperties instead")
    return problems


def schema_errors(field: str, schema: Any) -> list[str]:
    """`schema_problems`, then whether the schema is valid JSON Schema (draft 2020-12)."""
    problems = schema_problems(field, schema)
    if problems:
        return problems
    # Without format checks (the meta-schema's `regex` format would compile each pattern with Python's re).
    error = best_match(_META_VALIDATOR.iter_errors(schema))
    if error is not None:
        return [f"{_path(field, error.path)}: not a valid JSON Schema (draft 2020-12): {_clip(error.message, 300)}"]
    return []


def violations(schema: Mapping[str, Any], instance: Any) -> list[SchemaViolation]:
    """Where `instance` breaks `schema`, sorted by path; a schema that cannot be evaluated is one violation."""
    spent = next((budget for budget in _budgets.get() if budget.left < 0), None)
    if spent is not None:  # the pass has no steps left: answer at once, without walking the schema again
        return [_too_costly(spent.limit)]
    problem = _first_problem(schema)
    if problem:  # a type that is not Ready never gets here; a run's snapshot from an older operator might
        return [SchemaViolation(f"the type's schema cannot be used: {problem}")]
    return _evaluate(schema, instance)


def _evaluate(schema: Mapping[str, Any], instance: Any) -> list[SchemaViolation]:
    budgets = _budgets.set((*_budgets.get(), _Budget(MAX_CHECK_STEPS, MAX_CHECK_STEPS)))
    try:
        validator = GuardedValidator(dict(schema), registry=Registry())
        return sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
    except _TooCostlyError as error:
        return [_too_costly(error.limit)]
    except SchemaError as error:
        return [SchemaViolation(f"the type's schema is not valid JSON Schema: {_clip(error.message, 200)}")]
    except (Unresolvable, _UnrunnablePatternError) as error:
        return [SchemaViolation(f"the type's schema cannot be evaluated: {_clip(str(error), 200)}")]
    except RecursionError:
        return [SchemaViolation("the type's schema refers to itself without end for this value (a $ref loop); "
                                "make every $ref cycle pass through a property or an item")]
    finally:
        _budgets.reset(budgets)


def _too_costly(limit: int) -> SchemaViolation:
    return SchemaViolation(f"checking against the type's schema took more than {limit} steps "
                           f"({'this check' if limit == MAX_CHECK_STEPS else 'all checks of this pass'}); "
                           "simplify the schema (fewer anyOf/oneOf nested through $ref) or the value")


_SEEN: dict[int, tuple[Mapping[str, Any], str | None]] = {}
"""The verdict on schema objects checked lately, by identity (each entry holds its object, so no id is reused):
a run's pass or a Workflow's validation checks the same type's schema object once per step."""


def _first_problem(schema: Mapping[str, Any]) -> str | None:
    """`schema_problems`' first, remembered by the schema object and by its JSON."""
    seen = _SEEN.get(id(schema))
    if seen is not None and seen[0] is schema:
        return seen[1]
    try:
        problem = _first_problem_of(json.dumps(schema, sort_keys=True, separators=(",", ":")))
    except (RecursionError, TypeError, ValueError):
        problem = next(iter(schema_problems("schema", schema)), "not JSON")
    if len(_SEEN) >= 256:
        del _SEEN[next(iter(_SEEN))]
    _SEEN[id(schema)] = (schema, problem)
    return problem


@lru_cache(maxsize=256)
def _first_problem_of(text: str) -> str | None:
    return next(iter(schema_problems("schema", json.loads(text))), None)


def _shape_problem(field: str, schema: Any) -> str | None:
    """Depth, entries per container and values, walked without recursion (a deep value must not raise here)."""
    stack: list[tuple[Any, int, str]] = [(schema, 1, field)]
    values = 0
    while stack:
        value, depth, where = stack.pop()
        values += 1
        if values > MAX_SCHEMA_VALUES:
            return (f"{field}: holds more than {MAX_SCHEMA_VALUES} values; split the type, or move shared parts "
                    "under $defs and refer to them")
        if not isinstance(value, (Mapping, list)):
            continue
        if depth > MAX_SCHEMA_DEPTH:
            return (f"{_clip(where, 200)}: nests objects and lists more than {MAX_SCHEMA_DEPTH} levels deep; "
                    "flatten the schema (move nested parts under $defs and refer to them)")
        if len(value) > MAX_SCHEMA_ITEMS:
            return (f"{_clip(where, 200)}: holds more than {MAX_SCHEMA_ITEMS} entries; split the type or "
                    "shorten the list")
        children = value.items() if isinstance(value, Mapping) else enumerate(value)
        stack.extend((child, depth + 1, _step(where, key)) for key, child in children)
    return None


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = ("additionalProperties", "unevaluatedProperties", "items", "unevaluatedItems", "contains",
               "propertyNames", "not", "if", "then", "else", "additionalItems")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def _subschemas(field: str, schema: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every schema object inside `schema` where JSON Schema reads one, with its path (the shape is bounded)."""
    stack: list[tuple[str, Any]] = [(field, schema)]
    while stack:
        where, node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        yield where, node
        for keyword in _SCHEMA_MAPS:
            if isinstance(node.get(keyword), Mapping):
                stack.extend((f"{where}.{keyword}.{name}", child) for name, child in node[keyword].items())
        for keyword in _SCHEMA_ONE:
            if isinstance(node.get(keyword), Mapping):
                stack.append((f"{where}.{keyword}", node[keyword]))
        for keyword in _SCHEMA_LISTS:
            if isinstance(node.get(keyword), list):
                stack.extend((f"{where}.{keyword}[{index}]", child) for index, child in enumerate(node[keyword]))


def _pattern_problem(where: str, pattern: str) -> list[str]:
    if len(pattern) > MAX_PATTERN_LENGTH:
        return [f"{where}: longer than {MAX_PATTERN_LENGTH} characters; shorten the pattern"]
    try:
        _regex(pattern)
    except _UnrunnablePatternError as error:
        return [f"{where}: {_clip(str(error), 200)}; {ADVICE_PATTERN}"]
    return []


@lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        message = error.args[0].decode(errors="replace") if error.args and isinstance(error.args[0], bytes) \
            else str(error)
        raise _UnrunnablePatternError(f"not a pattern RE2 can run: {message}") from None


def _spend() -> None:
    for budget in _budgets.get():
        budget.left -= 1
        if budget.left < 0:
            raise _TooCostlyError(budget.limit)


Validator = Any
"""A jsonschema validator instance (its protocol type lacks `descend`, which keywords use)."""
Keyword = Callable[[Validator, Any, Any, Mapping[str, Any]], Iterable[SchemaViolation] | None]


def _metered(keyword: Keyword) -> Keyword:
    def evaluate(validator: Validator, value: Any, instance: Any, schema: Mapping[str, Any]) -> Any:
        _spend()
        return keyword(validator, value, instance, schema)
    return evaluate


def _pattern(
    validator: Validator, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[SchemaViolation]:
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield SchemaViolation(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Validator, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[SchemaViolation]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            _spend()
            if _regex(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Validator, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[SchemaViolation]:
    """jsonschema's own, with the patternProperties match on RE2."""
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = [_regex(pattern) for pattern in schema.get("patternProperties", {})]
    extras = sorted((key for key in instance
                     if key not in properties and not any(regex.search(key) for regex in patterns)), key=str)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            names = ", ".join(repr(extra) for extra in extras)
            listed = ", ".join(repr(pattern) for pattern in sorted(schema["patternProperties"]))
            yield SchemaViolation(f"{names} {verb} not match any of the regexes: {listed}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield SchemaViolation("Additional properties are not allowed "
                                  f"({', '.join(repr(extra) for extra in extras)} {verb} unexpected)")


def _unique_items(
    validator: Validator, unique: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[SchemaViolation]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _comparable(item)
        if key in seen:
            yield SchemaViolation(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def _comparable(value: Any) -> Any:
    """A hashable form equal exactly when JSON Schema calls two values equal (1 == 1.0, true != 1)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_comparable(item) for item in value))
    if isinstance(value, Mapping):
        return ("object", frozenset((key, _comparable(item)) for key, item in value.items()))
    return ("other", repr(value))


_KEYWORDS = {**Draft202012Validator.VALIDATORS, "pattern": _pattern, "patternProperties": _pattern_properties,
             "additionalProperties": _additional_properties, "uniqueItems": _unique_items}

GuardedValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, validators={name: _metered(keyword) for name, keyword in _KEYWORDS.items()},
)
"""Draft 2020-12 with RE2 patterns, hashed uniqueItems and a step budget; always built with an empty registry."""


SCHEMA_REFERENCES = ("$ref", "$dynamicRef")


def local_references_rule(value: str, depth: int = MAX_SCHEMA_DEPTH) -> str:
    """CEL that holds when no object in `value`, down to `depth` levels, has a `$ref`/`$dynamicRef` string that
    does not start with `#`: the chart's step-type-schemas admission policy carries it (a unit test keeps the two
    equal). CEL has no recursion, so it is unrolled one comprehension per level, as
    towline.api.run.bounded_nesting_rule is; deeper levels are that rule's to refuse. Unlike `schema_problems`,
    it looks at every object, a `const` or `default` value's included (stricter, never looser)."""
    def local(name: str) -> str:
        return " && ".join(f"(!('{key}' in {name}) || type({name}['{key}']) != string || "
                           f"{name}['{key}'].startsWith('#'))" for key in SCHEMA_REFERENCES)

    expression = "true"
    for level in range(depth, 0, -1):
        name = value if level == 1 else f"v{level - 1}"
        children = f"(type({name}) == map ? {name}.map(k, {name}[k]) : (type({name}) == list ? {name} : []))"
        expression = f"(type({name}) != map || {local(name)}) && {children}.all(v{level}, {expression})"
    return expression


_META_VALIDATOR = Draft202012Validator(Draft202012Validator.META_SCHEMA, registry=Registry())


def _step(where: str, key: Any) -> str:
    return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}"


def _path(root: str, parts: Iterable[Any]) -> str:
    path = root
    for part in parts:
        path = _step(path, part)
    return path


def _clip(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
