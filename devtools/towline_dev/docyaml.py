"""The YAML a Markdown document shows, as the objects a test hands to `kubectl apply --dry-run=server`.

Every ```yaml block of README.md and docs/**/*.md is one of three things, and which one is decided
by the block itself or by the line right above its opening fence, never by a guess:

- whole objects: every YAML document in it has `apiVersion` and `kind`. Applied as written (the
  block's own text goes to kubectl, so kubectl's YAML reader reads it);
- a fragment, marked `<!-- fragment: KIND at PATH -->` (or `<!-- fragment: KIND -->` for the
  object's top): part of a KIND object, put at PATH (`spec`, `spec.triggers`, `spec.steps[0]`) of
  that kind's base object in BASES. A mapping is merged in (key by key, nested mappings merged
  too), anything else replaces what is at PATH. The fragment is read as kubectl reads YAML
  (YAML 1.1: an unquoted `on`, `off`, `yes` or `no` is a boolean, so `on:` becomes the key
  `true`), and the wrapped object goes to kubectl as JSON;
- `<!-- not-applied: WHY -->`: not an object the API server takes (chart values, a status the
  operator writes); WHY is printed with the count of blocks applied.

A block that is none of these is an error naming its file and line and the markers to choose
from: a new fragment in the docs cannot be skipped without saying so.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from towline_dev.consoleblocks import fenced_blocks, substitute

API_VERSION = "towline.dev/v1alpha1"
BASES: dict[str, dict[str, Any]] = {
    "Workflow": {
        "apiVersion": API_VERSION, "kind": "Workflow", "metadata": {"name": "docs-fragment"},
        "spec": {"steps": [{"id": "call", "action": "http.request", "with": {"url": "https://api.example.com/"}}]},
    },
    "WorkflowRun": {
        "apiVersion": API_VERSION, "kind": "WorkflowRun", "metadata": {"name": "docs-fragment"},
        "spec": {"workflowRef": {"name": "docs-fragment"}},
    },
}
"""The smallest object of each kind the API server takes, that a fragment is put into."""

_FRAGMENT = re.compile(r"^<!--\s*fragment:\s*(\w+)(?:\s+at\s+(\S+))?\s*-->$")
_NOT_APPLIED = re.compile(r"^<!--\s*not-applied:\s*(\S.*?)\s*-->$")
_MARKER = re.compile(r"^<!--\s*(fragment|not-applied)")
_PATH = re.compile(r"[A-Za-z_]\w*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*")
_PATH_PART = re.compile(r"([A-Za-z_]\w*)|\[(\d+)\]")


class DocYamlError(ValueError):
    """A block or marker that breaks the rules; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class DocYaml:
    """One ```yaml block of a document, read by the rules above."""

    source: str
    """`path:line` of the block's opening fence."""
    text: str
    """What kubectl is given: the block's text (whole objects) or the wrapped fragment as JSON."""
    documents: tuple[dict[str, Any], ...]
    """The objects it holds, as read here (to know their kinds, names and namespaces)."""
    not_applied: str | None = None
    """Why it is not applied; None when it is."""
    fragment: str | None = None
    """`KIND at PATH` when it is a fragment."""


class _KubectlLoader(yaml.SafeLoader):
    """YAML 1.1 as kubectl reads it into JSON: booleans as YAML 1.1 has them, timestamps stay strings."""


_KubectlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def read_yaml(text: str) -> list[Any]:
    """The documents of `text` as kubectl reads them (empty documents left out)."""
    return [document for document in yaml.load_all(text, Loader=_KubectlLoader) if document is not None]


def doc_yaml(path: Path, root: Path, placeholders: dict[str, str] | None = None) -> list[DocYaml]:
    """Every ```yaml block of the Markdown file `path` (named relative to `root`), read by the rules.

    `placeholders` (`towline_dev.consoleblocks.substitute`) are replaced in the block's text first.
    """
    name = path.relative_to(root).as_posix()
    found: list[DocYaml] = []
    errors: list[str] = []
    lines = path.read_text().splitlines()
    for block in fenced_blocks(lines):
        above = lines[block.line - 2].strip() if block.line >= 2 else ""
        source = f"{name}:{block.line}"
        if block.info not in {"yaml", "yml"}:
            if _MARKER.match(above):
                errors.append(f"{source}: the marker {above!r} stands above a ```{block.info} block; "
                              "markers are for ```yaml blocks only")
            continue
        try:
            found.append(_read_block(source, substitute("\n".join(block.body) + "\n", placeholders or {}), above))
        except DocYamlError as error:
            errors.append(str(error))
    if errors:
        raise DocYamlError("\n".join(errors))
    return found


def _read_block(source: str, text: str, above: str) -> DocYaml:
    try:
        documents = read_yaml(text)
    except yaml.YAMLError as error:
        raise DocYamlError(f"{source}: the block is not YAML: {error}") from None
    if not_applied := _NOT_APPLIED.match(above):
        return DocYaml(source, text, (), not_applied=not_applied[1])
    if fragment := _FRAGMENT.match(above):
        kind, path = fragment[1], fragment[2] or ""
        if len(documents) != 1:
            raise DocYamlError(f"{source}: a fragment is one YAML document; this block holds {len(documents)}")
        wrapped = wrap_fragment(source, kind, path, documents[0])
        return DocYaml(source, json.dumps(wrapped, indent=1) + "\n", (wrapped,),
                       fragment=f"{kind} at {path}" if path else kind)
    if _MARKER.match(above):
        raise DocYamlError(f"{source}: the marker {above!r} does not read `<!-- fragment: KIND at PATH -->` "
                           "or `<!-- not-applied: WHY -->`")
    if documents and all(isinstance(d, dict) and d.get("apiVersion") and d.get("kind") for d in documents):
        return DocYaml(source, text, tuple(documents))
    raise DocYamlError(
        f"{source}: this ```yaml block is not a whole object (apiVersion and kind in every document); put "
        f"`<!-- fragment: KIND at PATH -->` on the line above it (KIND one of {', '.join(BASES)}, PATH where "
        "it goes, e.g. spec or spec.triggers) or `<!-- not-applied: WHY -->` if the API server is not what "
        "reads it"
    )


def wrap_fragment(source: str, kind: str, path: str, fragment: Any) -> dict[str, Any]:
    """The base object of `kind` with `fragment` put at `path` (mappings merged, anything else replacing)."""
    if kind not in BASES:
        raise DocYamlError(f"{source}: no base object for kind {kind!r}; use one of {', '.join(BASES)}")
    if path and not _PATH.fullmatch(path):
        raise DocYamlError(f"{source}: {path!r} is not a path such as spec, spec.triggers or spec.steps[0]")
    wrapped = copy.deepcopy(BASES[kind])
    parent: Any = None
    key: str | int | None = None
    node: Any = wrapped
    for name, index in _PATH_PART.findall(path):
        parent, key = node, (name if name else int(index))
        try:
            node = node[key] if isinstance(key, int) else node.setdefault(key, {})
        except (IndexError, TypeError, AttributeError):
            raise DocYamlError(f"{source}: the base {kind} has nothing at {path!r}") from None
    if isinstance(fragment, dict) and isinstance(node, dict):
        _merge(node, fragment)
    elif parent is None:
        raise DocYamlError(f"{source}: a fragment at the top of a {kind} is a mapping")
    else:
        parent[key] = fragment
    return wrapped


def _merge(into: dict[Any, Any], extra: dict[Any, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def documented_yaml(root: Path, placeholders: dict[str, str] | None = None) -> list[DocYaml]:
    """The ```yaml blocks of README.md and docs/**/*.md under `root`, in file order."""
    found: list[DocYaml] = []
    errors: list[str] = []
    for path in markdown_files(root):
        try:
            found += doc_yaml(path, root, placeholders)
        except DocYamlError as error:
            errors.append(str(error))
    if errors:
        raise DocYamlError("\n".join(errors))
    return found


def markdown_files(root: Path) -> Iterable[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
