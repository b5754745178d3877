"""The chart's values.yaml and values.schema.json, read as the chart tests and the docs checks read them.

`schema_at` answers whether the schema describes a value path (`archive.api.enabled`,
`stepPods.tolerations[]`), so a test can hold values.yaml to the schema and the docs to both.
`uncommented_values` finds the keys of values.yaml that nothing explains: a key is explained by a
comment of its own (the comment lines right above it, at its indentation, or one after it on its line)
or by its parent's, since a short block such as `image:` or `leaderElection:` is described once above it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import yaml

from towline_dev import REPO_ROOT

CHART = REPO_ROOT / "charts" / "towline"


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """A schema node with its `$ref` (local, #/definitions/...) followed; its own keywords win."""
    while "$ref" in node:
        target: Any = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    return node


def value_paths(value: Any, path: str = "") -> Iterator[str]:
    """The dotted path of every key in values.yaml (list items as `[]`)."""
    if isinstance(value, dict):
        for key, child in value.items():
            child_path = f"{path}.{key}" if path else key
            yield child_path
            yield from value_paths(child, child_path)
    elif isinstance(value, list):
        for item in value:
            yield from value_paths(item, f"{path}[]")


def schema_at(path: str, root: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of the value at `path`, or None if the schema does not name it (free-form maps name any key)."""
    node = resolve(root, root)
    for part in path.replace("[]", ".[]").split("."):
        if part == "[]":
            if not isinstance(node.get("items"), dict):
                return None
            node = resolve(node["items"], root)
        elif part in node.get("properties", {}):
            node = resolve(node["properties"][part], root)
        elif isinstance(node.get("additionalProperties"), dict):
            node = resolve(node["additionalProperties"], root)
            if node.get("type") not in ("object", "array"):
                return node  # a map of plain values: the rest is its key's own dots (sidecar.istio.io/inject)
        elif node.get("type") == "object" and "additionalProperties" not in node and "properties" not in node:
            return {}  # a free-form map: any key, any value
        else:
            return None
    return node


_TRAILING_COMMENT = re.compile(r"\s#(\s|$)")


def _has_own_comment(lines: list[str], line: int, column: int) -> bool:
    """Whether the key at (0-based) `line`, `column` has a comment after it on its line or right above it."""
    if _TRAILING_COMMENT.search(lines[line]):
        return True
    above = lines[line - 1] if line > 0 else ""
    return above.strip().startswith("#") and len(above) - len(above.lstrip()) == column


def uncommented_values(text: str) -> list[tuple[int, str]]:
    """The keys of a values file (as 1-based line, dotted path) that neither a comment of their own nor their
    parent's explains. Mappings inside lists are examples of items, not values, and are not looked into."""
    lines = text.splitlines()
    missing: list[tuple[int, str]] = []

    def walk(node: yaml.Node, path: str, parent_commented: bool) -> None:
        if not isinstance(node, yaml.MappingNode) or node.flow_style:
            return  # a flow mapping ({cpu: 50m, memory: 64Mi}) is one value, explained with its key
        for key, value in node.value:
            child = f"{path}.{key.value}" if path else str(key.value)
            own = _has_own_comment(lines, key.start_mark.line, key.start_mark.column)
            if not own and not parent_commented:
                missing.append((key.start_mark.line + 1, child))
            walk(value, child, own)

    root = yaml.compose(text)
    if root is not None:
        walk(root, "", parent_commented=False)
    return missing
