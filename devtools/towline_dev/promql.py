"""The metric names a PromQL expression reads, so tests can check dashboards and alerts against the registry.

A small tokenizer, not a full parser: it knows what in PromQL is *not* a metric name — string
literals, label matchers in `{…}`, ranges and subqueries in `[…]`, the label lists after
`by`/`without`/`on`/`ignoring`/`group_left`/`group_right`, aggregation operators and function names (an
identifier followed by `(`), keywords, numbers and durations, and Grafana's `$variables` — and
returns every other identifier. A selector written only as `{__name__="…"}` names its metric in a
matcher and is refused (ValueError) rather than silently read as naming none.
Grafana's `label_values(metric, label)` variable queries name their metric as the first argument.
"""

from __future__ import annotations

import re

KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2", "start", "end"})
"""Binary operators and literals that read as identifiers (`start()`/`end()` of `@` are followed by `(`)."""

AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                          "bottomk", "topk", "quantile", "limitk", "limit_ratio"})
"""Aggregation operators: followed by `(` or by `by (…)`/`without (…)` and then `(`."""

LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
"""Keywords followed by a parenthesised list of label names."""

_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NUMBER = re.compile(r"(0x[0-9A-Fa-f]+|[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)([a-z]+[0-9a-z]*)*")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?\s*,")


def _skip_string(text: str, start: int) -> int:
    quote, index = text[start], start + 1
    while index < len(text):
        if text[index] == "\\" and quote != "`":
            index += 2
            continue
        if text[index] == quote:
            return index + 1
        index += 1
    raise ValueError(f"unterminated string at {start}: {text!r}")


def _skip_to(text: str, start: int, closing: str) -> int:
    """Past the `closing` bracket that ends the group opened at `start`, strings inside skipped."""
    index = start + 1
    while index < len(text):
        char = text[index]
        if char in "\"'`":
            index = _skip_string(text, index)
            continue
        if char == closing:
            return index + 1
        index += 1
    raise ValueError(f"unclosed {text[start]!r} at {start}: {text!r}")


def _skip_non_name(expr: str, index: int) -> int | None:
    """Past what starts at `index` if it can hold no metric name (see the module's docstring), else None."""
    char = expr[index]
    if char.isspace() or char in "+-*/%^=!<>,()@":
        return index + 1
    if char in "\"'`":
        return _skip_string(expr, index)
    if char in "{[":  # label matchers; a range or subquery
        end = _skip_to(expr, index, "}" if char == "{" else "]")
        if char == "{" and "__name__" in expr[index:end]:
            raise ValueError(f"a metric named by a __name__ matcher is not read: {expr[index:end]!r}")
        return end
    if char == "$":  # a Grafana variable: $name, ${name} or ${name:format}
        index = _skip_to(expr, index + 1, "}") if expr[index + 1:index + 2] == "{" else index + 1
        while index < len(expr) and (expr[index].isalnum() or expr[index] == "_"):
            index += 1
        return index
    if char.isdigit() or (char == "." and expr[index + 1:index + 2].isdigit()):
        number = _NUMBER.match(expr, index)
        assert number is not None
        return number.end()
    return None


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects (see the module's docstring for what is left out)."""
    names: set[str] = set()
    index = 0
    while index < len(expr):
        skipped = _skip_non_name(expr, index)
        if skipped is not None:
            index = skipped
            continue
        match = _IDENTIFIER.match(expr, index)
        if match is None:
            raise ValueError(f"unexpected {expr[index]!r} at {index} in {expr!r}")
        word, index = match.group(), match.end()
        rest = expr[index:].lstrip()
        if word.lower() in LABEL_LISTS:
            if rest.startswith("("):
                index = _skip_to(expr, len(expr) - len(rest), ")")
        elif word.lower() not in KEYWORDS | AGGREGATIONS and not rest.startswith("("):
            names.add(word)
    return names


def grafana_query_metric_names(query: str) -> set[str]:
    """Metric names of a Grafana Prometheus variable query: `label_values(metric, label)` or a PromQL query."""
    match = _LABEL_VALUES.match(query)
    if match is not None:
        return {match.group(1)}
    return metric_names(query)
