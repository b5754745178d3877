"""The worst-case CEL expression the cost limit allows: how long it really takes to evaluate.

For each shape, the largest list size the budget still admits, and the
evaluation time at that size (the best of three, on this machine as it is now).
"""

from __future__ import annotations

import time

from towline.expression_cost import COST_BUDGET, runtime_cost_problem
from towline.expressions import evaluate

SHAPES = {
    "one exists": "params.l.exists(a, a < 0)",
    "two nested": "params.l.map(a, params.l.map(b, a * b)).size()",
    "three nested": "params.l.map(a, params.l.map(b, params.l.map(c, a + b + c))).size()",
    "one map (copies)": "params.l.map(a, a * 2).size()",
    "two nested exists": "params.l.exists(a, params.l.exists(b, a * b < 0))",
    "exists with matches": "params.l.exists(a, string(a).matches('^x+$'))",
}


def largest_allowed(source: str) -> int:
    low, high = 1, 1_000_000
    while low < high:
        middle = (low + high + 1) // 2
        if runtime_cost_problem(source, {"params": {"l": [0] * middle}}) is not None:
            high = middle - 1
        else:
            low = middle
    return low


def main() -> None:
    print(f"CEL cost limit: budget {COST_BUDGET:,} estimated cost units per expression")
    for name, source in SHAPES.items():
        size = largest_allowed(source)
        context = {"params": {"l": list(range(size))}}
        best = min(_timed(source, context) for _ in range(3))
        print(f"  {name:22} largest allowed list {size:6,}  evaluation {best * 1000:8.1f} ms")


def _timed(source: str, context: dict[str, object]) -> float:
    started = time.perf_counter()
    evaluate(source, context)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
