"""How expensive a CEL expression may get: checked at validation and again before every evaluation.

The CEL library has no cost limit of its own and holds the interpreter lock
while it evaluates, so one expression that nests comprehensions over large
lists (`l.map(a, l.map(b, l.map(c, ...))))`) would stall every run the operator
reconciles. This module estimates, from the source and the size of the data it
is given, how many elements the comprehensions may visit, and refuses an
expression over the budget before it runs. The estimate is deliberately
pessimistic: every comprehension may iterate over the largest list or map in
the data (or written in the source), widened by each `+` that could
concatenate lists. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

MAX_SOURCE_CHARS = 4096
"""Longest expression (the text between `${{` and `}}`, or a `when`)."""

MAX_NESTING = 3
"""Comprehensions (all, exists, exists_one, filter, map) nested inside one another."""

# Cost units, measured on the CEL library in use: one unit is about 50 ns of evaluation. A
# comprehension step costs ~10; map and filter also copy their growing result list on every step
# (quadratic in the list's length); `matches` compiles its pattern on every call (~200).
ITERATION_COST = 10
MATCHES_COST = 200
COST_BUDGET = 2_000_000
"""Most cost units one expression may use by the estimate below (about 0.1 s; 0.2 s for nested maps)."""

STRING_LITERAL = re.compile(r"""'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*\"""", re.S)
_COMPREHENSION = re.compile(r"\.\s*(all|exists_one|exists|filter|map)\s*\(")
_COPYING = frozenset({"filter", "map"})


@dataclass(frozen=True)
class CostShape:
    """What the source says about an expression's cost, before any data is known."""

    length: int
    comprehensions: tuple[tuple[int, bool], ...]
    """(nesting depth, whether it builds a list) of each comprehension; depth 1 is not inside another."""
    literal_elements: int
    concatenations: int
    matches_calls: int

    @property
    def depths(self) -> tuple[int, ...]:
        return tuple(depth for depth, _ in self.comprehensions)

    def estimate(self, largest_collection: int) -> int:
        """Cost units when every comprehension ranges over the largest list it could see."""
        if not self.comprehensions:
            return self.length + self.matches_calls * MATCHES_COST
        reach = (largest_collection + self.literal_elements) * (1 + self.concatenations)
        total = self.length
        for depth, copies in self.comprehensions:
            total += int(reach**depth) * (ITERATION_COST + (reach if copies else 0))
        innermost = int(reach ** max(self.depths))
        return total + self.matches_calls * MATCHES_COST * innermost


@lru_cache(maxsize=4096)
def cost_shape(source: str) -> CostShape:
    code = STRING_LITERAL.sub("''", source)
    opens = {match.end() - 1: match.group(1) in _COPYING for match in _COMPREHENSION.finditer(code)}
    stack: list[bool] = []
    comprehensions: list[tuple[int, bool]] = []
    for index, char in enumerate(code):
        if char in "([{":
            comprehension = index in opens
            if comprehension:
                comprehensions.append((sum(stack) + 1, opens[index]))
            stack.append(comprehension)
        elif char in ")]}" and stack:
            stack.pop()
    return CostShape(
        length=len(source), comprehensions=tuple(comprehensions), literal_elements=code.count(",") + 1,
        concatenations=code.count("+"), matches_calls=len(re.findall(r"\bmatches\s*\(", code)),
    )


def static_cost_problem(source: str) -> str | None:
    """Why an expression is too long, too deeply nested or too costly whatever its data; None if fine."""
    if len(source) > MAX_SOURCE_CHARS:
        return f"the expression is {len(source)} characters long, over the limit of {MAX_SOURCE_CHARS}; split it"
    shape = cost_shape(source)
    deepest = max(shape.depths, default=0)
    if deepest > MAX_NESTING:
        return (f"the expression nests {deepest} comprehensions (all, exists, exists_one, filter, map), over "
                f"the limit of {MAX_NESTING}; compute part of it in an earlier step")
    estimate = shape.estimate(0)
    if estimate > COST_BUDGET:
        return _too_costly(estimate, 0)
    return None


def runtime_cost_problem(source: str, context: Mapping[str, Any]) -> str | None:
    """Why evaluating `source` over `context` would cost more than the budget; None if it may run."""
    problem = static_cost_problem(source)
    if problem is not None:
        return problem
    shape = cost_shape(source)
    if not shape.depths:
        return None
    largest = largest_collection(context)
    estimate = shape.estimate(largest)
    return _too_costly(estimate, largest) if estimate > COST_BUDGET else None


def largest_collection(value: Any) -> int:
    """The most elements of any list or map inside `value` (the context's top level excluded)."""
    largest = 0
    pending = list(value.values()) if isinstance(value, Mapping) else [value]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            largest = max(largest, len(item))
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            largest = max(largest, len(item))
            pending.extend(item)
    return largest


def _too_costly(estimate: int, largest: int) -> str:
    data = f" over lists of up to {largest} items" if largest else ""
    return (f"the expression is too expensive to evaluate: an estimated {estimate:,} cost units{data}, over the "
            f"budget of {COST_BUDGET:,}; nest fewer of all/exists/exists_one/filter/map, call matches() less, "
            "or reduce the data in an earlier step")
