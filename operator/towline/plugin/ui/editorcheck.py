"""The editor's text checks: its YAML read within bounds, problems named by field path, YAML normalised for a diff.

Pure: no API call, no clock. What the editor posts is text a person typed or pasted, so it is read with
PyYAML's safe loader (no Python objects, no tags that run anything) inside limits: at most MAX_YAML_BYTES,
ONE document, and at most MAX_YAML_NODES values counted as the aliases expand (a "billion laughs" document
of a few hundred bytes names 10^9 values through nested aliases; it is refused after composing, before
anything walks the expanded tree), no deeper than MAX_YAML_DEPTH, and no alias that contains itself. Nothing
the YAML names is ever fetched.

A problem's `path` is the dotted field path of the Workflow document as the API server names fields
(`spec.steps[2].with.url`), or "" when nothing names one; its message is always kept whole.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from towline.api.secretrefs import secret_reference_paths
from towline.api.workflow import Workflow
from towline.jsontypes import JSON

Source = Literal["yaml", "offline", "admission", "schema"]

MAX_YAML_BYTES = 1024 * 1024
"""The longest text (and request body) the editor takes: 1 MiB, the API server's own request limit is 3 MiB."""
MAX_YAML_NODES = 1_000_000
"""Values in the document once its aliases are expanded: a text of MAX_YAML_BYTES without aliases holds at most
about half a million (`[0,0,...]`, two bytes a value), so only aliases can go past it."""
MAX_YAML_DEPTH = 64
"""Nesting of mappings and lists; the chart's admission policy refuses a spec deeper than 64 levels too."""

_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PATH_IN_TEXT = re.compile(r"\b(?:spec|metadata)(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])+")
_SECRET_IN_TEXT = re.compile(r"may not get Secret ([a-z0-9]([-a-z0-9.]*[a-z0-9])?) in namespace")


@dataclass(frozen=True)
class Problem:
    """One thing the editor shows at a field (or at the top, path "")."""

    path: str
    message: str
    source: Source

    def view(self) -> JSON:
        return {"path": self.path, "message": self.message, "source": self.source}


class YamlRefused(ValueError):  # noqa: N818 - a refusal the person sees, not a failure
    """The text is not one YAML document the editor reads; the message says where and why."""


def load_document(text: str) -> Any:
    """The one YAML document in `text`, read within the limits above; raises YamlRefused naming the line."""
    if len(text.encode("utf-8", errors="replace")) > MAX_YAML_BYTES:
        raise YamlRefused(f"the YAML is longer than {MAX_YAML_BYTES // 1024} KiB: split the Workflow or shorten it")
    loader = _LOADER(text)
    try:
        nodes: list[yaml.Node] = []
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                nodes.append(node)
            if len(nodes) > 1:
                raise YamlRefused("the text holds more than one YAML document (---): the editor edits one Workflow")
        if not nodes:
            raise YamlRefused("the text is empty: write a Workflow (apiVersion, kind, metadata, spec)")
        _check_size(nodes[0])
        return loader.construct_document(nodes[0])
    except yaml.MarkedYAMLError as error:
        raise YamlRefused(_marked_message(error)) from None
    except yaml.YAMLError as error:
        raise YamlRefused(f"not YAML: {error}") from None
    except RecursionError:
        raise YamlRefused(f"the YAML nests deeper than {MAX_YAML_DEPTH} levels: flatten it") from None
    finally:
        loader.dispose()


def _marked_message(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(part for part in (error.context, error.problem) if part)
    return f"{where}{what or 'not YAML'}"


def _check_size(root: yaml.Node) -> None:
    """Refuse a node tree that expands past MAX_YAML_NODES values, nests past MAX_YAML_DEPTH or contains itself.

    Sizes are counted once per node and shared through aliases, so the count of an exponential expansion
    is found in time linear in the text."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if depth > MAX_YAML_DEPTH:
            raise YamlRefused(_at(node, f"the YAML nests deeper than {MAX_YAML_DEPTH} levels: flatten it"))
        if key in on_path:
            raise YamlRefused(_at(node, "an alias refers to a value that contains it (a loop): write it out"))
        on_path.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(size(item, depth + 1) for item in node.value)
        on_path.discard(key)
        if total > MAX_YAML_NODES:
            raise YamlRefused(_at(node, f"the YAML expands to more than {MAX_YAML_NODES} values (through its "
                                        "aliases, *name): write the values out or use fewer aliases"))
        sizes[key] = total
        return total

    size(root, 1)


def _at(node: yaml.Node, message: str) -> str:
    mark = node.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}: {message}" if mark is not None else message


def document_problems(document: Any) -> list[Problem]:
    """What makes `document` no Workflow manifest at all (the offline validator and the API server judge the rest)."""
    if not isinstance(document, dict):
        return [Problem("", "the YAML must be a mapping: a Workflow with apiVersion, kind, metadata and spec",
                        "schema")]
    problems = []
    api_version = Workflow.model_fields["api_version"].default
    if document.get("apiVersion") != api_version:
        problems.append(Problem("apiVersion", f"must be {api_version}", "schema"))
    if document.get("kind") != "Workflow":
        problems.append(Problem("kind", "must be Workflow: the editor edits Workflows", "schema"))
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        problems.append(Problem("metadata.name", "is required: the Workflow's name", "schema"))
    if not isinstance(document.get("spec"), dict):
        problems.append(Problem("spec", "is required: a Workflow needs spec.steps", "schema"))
    return problems


def spec_path(field: str) -> str:
    """The offline validator's field (`steps[1].with.url`, or `spec....`) as a document path."""
    if not field:
        return "spec"
    return field if field.startswith(("spec", "metadata")) else f"spec.{field}"


def api_field_path(field: Any) -> str:
    """A Status cause's `field` as a document path: the API server's own spelling, `<nil>` and blanks as ""."""
    text = str(field or "").strip()
    return "" if text in ("<nil>", "[]") else text


def refusal_problems(status: int, message: str, body: Mapping[str, Any], document: Any) -> list[Problem]:
    """The API server's refusal of the editor's (dry-run) apply, each problem at the field it concerns.

    A schema refusal (422 Invalid) lists its causes, each with its field; an admission policy's (403) names a
    field in its message, or a Secret, which is put on every field of the document that names that Secret.
    The whole message is kept on every problem made from it.
    """
    source: Source = "schema" if status == 422 else "admission"
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    causes = [c for c in (details or {}).get("causes") or [] if isinstance(c, dict)]
    found: list[Problem] = []
    for cause in causes:
        text, field = str(cause.get("message") or message), api_field_path(cause.get("field"))
        found += [Problem(field, text, source)] if field else _placed(text, source, document)
    return _unique(found) if found else _placed(message, source, document)


def _placed(message: str, source: Source, document: Any) -> list[Problem]:
    """`message` at each field it names: a Secret (every field naming it), else a path in its words, else ""."""
    secret = _SECRET_IN_TEXT.search(message)
    paths = secret_paths(document, secret.group(1)) if secret is not None else []
    paths = paths or list(dict.fromkeys(_PATH_IN_TEXT.findall(message)))
    return [Problem(path, message, source) for path in paths] or [Problem("", message, source)]


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def secret_paths(document: Any, secret: str) -> list[str]:
    """Every field of the Workflow document that names Secret `secret` (the fields the credentials policy reads)."""
    found: list[str] = []
    for template in secret_reference_paths(Workflow):
        found += [path for path, value in _walk(document, template) if value == secret]
    return found


def _walk(value: Any, template: str, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every place `template` (`spec.steps[].credentials{}`) reaches in `value`."""
    if not template:
        yield path, value
        return
    head = re.match(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[\]|\{\}", template)
    if head is None:
        return
    rest = template[head.end():]
    if head.group(0) == "[]":
        for index, item in enumerate(value if isinstance(value, list) else []):
            yield from _walk(item, rest, f"{path}[{index}]")
    elif head.group(0) == "{}":
        for key, item in (value.items() if isinstance(value, dict) else []):
            yield from _walk(item, rest, f"{path}.{key}")
    elif isinstance(value, dict) and head.group(1) in value:
        name = head.group(1)
        yield from _walk(value[name], rest, f"{path}.{name}" if path else name)


def normalised(document: Any) -> str:
    """YAML both sides of a diff are written as: keys in the document's order, block style, no aliases."""
    class _NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump(document, Dumper=_NoAliases, sort_keys=False, allow_unicode=True, default_flow_style=False,
                     width=120)


def unified_diff(before: str, after: str, *, before_name: str, after_name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=before_name, tofile=after_name))


GITOPS_TOOLS = {"argocd": "Argo CD", "flux": "Flux"}


def managed_by(metadata: Mapping[str, Any]) -> str | None:
    """"argocd" or "flux" when their labels or annotations say they manage the object, else None.

    Argo CD writes `argocd.argoproj.io/tracking-id` (annotation tracking) or its instance label
    (`app.kubernetes.io/instance`, together with an argocd.argoproj.io/ annotation, since Helm sets that label
    too); Flux labels what it applies `kustomize.toolkit.fluxcd.io/name` or `helm.toolkit.fluxcd.io/name`."""
    labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
    annotations = metadata.get("annotations") if isinstance(metadata.get("annotations"), dict) else {}
    if any(str(k).startswith(("kustomize.toolkit.fluxcd.io/", "helm.toolkit.fluxcd.io/")) for k in labels or {}):
        return "flux"
    argo_keys = [str(k) for k in [*(labels or {}), *(annotations or {})] if str(k).startswith("argocd.argoproj.io/")]
    if argo_keys:
        return "argocd"
    return None
