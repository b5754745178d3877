"""JSON schemas for kubeconform -strict, made from Kubernetes' OpenAPI document and from CRDs.

The same conversion as the schemas kubeconform downloads by default (openapi2jsonschema
`--kubernetes --expanded --stand-alone --strict`, and kubeconform's own script for CRDs):

- one file per kind, named as kubeconform looks it up: `<kind>-<group>-<version>.json`, lowercased,
  where <group> is the API group's first label (`apps`, `rbac`, `towline`), and `<kind>-<version>.json`
  for the core group;
- strict: every object schema that lists its properties refuses others (`additionalProperties:
  false`), which is what makes a misspelt field an error rather than something the API server
  silently drops; objects without a property list (labels, RawExtension) stay open, as do CRD
  objects marked `x-kubernetes-preserve-unknown-fields`;
- an optional field may be null (the API server takes null as unset), IntOrString is a string or an
  integer and a Quantity a string or a number, as in kubeconform's default schemas;
- `apiVersion` and `kind` must be the file's own.

Stand-alone here means each file carries the definitions it uses under `definitions` (rather
than inlining them), so recursive types need no special case. Descriptions and `x-kubernetes-*`
annotations are dropped: JSON Schema ignores them. CEL rules (`x-kubernetes-validations`) are not
checked; the API server does that.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

Schema = dict[str, Any]

DRAFT = "http://json-schema.org/draft-04/schema#"
"""kubeconform compiles schemas as draft 4 (a `$ref` there replaces its siblings, so none are kept)."""

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
INT_OR_STRING = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
REPLACED = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": INT_OR_STRING,
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
}
"""Definitions whose OpenAPI form (a string with a format) is not what manifests hold."""

NULLABLE = "-or-null"
"""Suffix of a definition's twin that also accepts null (for optional fields)."""

_DROPPED = {"description", "example", "externalDocs", "default", "readOnly"}
_NESTED = ("properties", "patternProperties", "definitions")
_SUBSCHEMA = ("items", "additionalProperties", "additionalItems", "not")
_SUBSCHEMAS = ("allOf", "anyOf", "oneOf")


def file_name(kind: str, api_version: str) -> str:
    """The file kubeconform reads for a kind of an apiVersion (`group/version`, or `version` for core)."""
    group, _, version = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind}{suffix}".lower() + ".json"


def convert(node: Any, *, strict: bool = True) -> Any:
    """One OpenAPI (v2, or a CRD's v3 subset) schema as draft-4 JSON Schema; see the module docstring."""
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return {"$ref": node["$ref"]}
    result = _extensions(node, _keywords(node, strict=strict))
    open_ended = node.get("x-kubernetes-preserve-unknown-fields") is True
    if strict and "properties" in result and "additionalProperties" not in result and not open_ended:
        result["additionalProperties"] = False
    if "properties" in result:
        required = set(node.get("required", ()))
        result["properties"] = {
            name: child if name in required else nullable(child) for name, child in result["properties"].items()
        }
    return result


def _keywords(node: Schema, *, strict: bool) -> Schema:
    """The JSON Schema keywords of a node, its subschemas converted; annotations left out."""
    result: Schema = {}
    for key, value in node.items():
        if key in _DROPPED or key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in _NESTED:
            result[key] = {name: convert(child, strict=strict) for name, child in value.items()}
        elif key in _SUBSCHEMA:
            result[key] = convert(value, strict=strict)
        elif key in _SUBSCHEMAS:
            result[key] = [convert(child, strict=strict) for child in value]
        else:
            result[key] = copy.deepcopy(value)
    return result


def _extensions(node: Schema, result: Schema) -> Schema:
    """What a CRD schema's Kubernetes extensions and `nullable` mean, as JSON Schema."""
    if node.get("x-kubernetes-int-or-string") and not ({"anyOf", "oneOf"} & result.keys()):
        result.pop("type", None)
        result.update(copy.deepcopy(INT_OR_STRING))
    if node.get("x-kubernetes-embedded-resource"):
        properties = result.setdefault("properties", {})
        for name in ("apiVersion", "kind"):
            properties.setdefault(name, {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})
    return nullable(result) if node.get("nullable") else result


def nullable(schema: Schema) -> Schema:
    """The schema, also accepting null.

    A reference becomes one to the definition's nullable twin (made by `closure`), rather than
    `anyOf: [ref, null]`: kubeconform reports only the first level of a failed anyOf, which would
    hide which field of a pod spec is wrong behind "/spec: 'anyOf' failed".
    """
    if "$ref" in schema:
        return {"$ref": schema["$ref"] + NULLABLE}
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    if isinstance(kind, list):
        return schema if "null" in kind else {**schema, "type": [*kind, "null"]}
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return {**schema, key: [*schema[key], {"type": "null"}]}
    return schema  # no type: anything, null included


def references(node: Any) -> Iterator[str]:
    """The definition names a converted schema refers to (`#/definitions/NAME`)."""
    if isinstance(node, dict):
        reference = node.get("$ref")
        if isinstance(reference, str):
            yield reference.removeprefix("#/definitions/")
        for key, value in node.items():
            if key in _NESTED:
                for child in value.values():
                    yield from references(child)
            elif key in _SUBSCHEMA:
                yield from references(value)
            elif key in _SUBSCHEMAS:
                for child in value:
                    yield from references(child)


def closure(roots: Any, definitions: dict[str, Schema]) -> dict[str, Schema]:
    """The converted definitions reachable from `roots`, by name."""
    found: dict[str, Schema] = {}
    pending = list(references(roots))
    while pending:
        name = pending.pop()
        if name in found:
            continue
        base = name.removesuffix(NULLABLE)
        if base not in definitions:
            raise ValueError(f"the OpenAPI document refers to {base!r} but does not define it")
        found[name] = definitions[base] if base == name else nullable(definitions[base])
        pending += references(found[name])
    return found


def _own_type(root: Schema, api_version: str, kind: str) -> Schema:
    properties = dict(root.get("properties", {}))
    for name, value in (("apiVersion", api_version), ("kind", kind)):
        if name in properties:
            properties[name] = {"type": "string", "enum": [value]}
    return {**root, "properties": properties}


def converted_definitions(openapi: Schema) -> dict[str, Schema]:
    """Every definition of a Kubernetes OpenAPI v2 document (swagger.json), converted."""
    converted = {name: convert(definition) for name, definition in openapi["definitions"].items()}
    converted.update(copy.deepcopy(REPLACED))
    return converted


def kubernetes_schemas(openapi: Schema) -> dict[str, Schema]:
    """File name -> schema for every group/version/kind of a Kubernetes OpenAPI v2 document."""
    definitions = converted_definitions(openapi)
    files: dict[str, Schema] = {}
    origin: dict[str, str] = {}
    for name, definition in openapi["definitions"].items():
        for gvk in definition.get("x-kubernetes-group-version-kind", ()):
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            target = file_name(gvk["kind"], api_version)
            if target in files:
                raise ValueError(f"{name} and {origin[target]} would both be {target}")
            root = _own_type(definitions[name], api_version, gvk["kind"])
            files[target] = {"$schema": DRAFT, **root, "definitions": closure(root, definitions)}
            origin[target] = name
    return files


def crd_schemas(crd: Schema, openapi: Schema) -> dict[str, Schema]:
    """File name -> schema for each version of a CustomResourceDefinition.

    Its `metadata` is Kubernetes' ObjectMeta (from `openapi`) as well as whatever the CRD says of it
    (the API server allows a CRD to constrain only the name), so labels and annotations are checked too.
    """
    spec = crd["spec"]
    kind = spec["names"]["kind"]
    definitions = converted_definitions(openapi)
    files: dict[str, Schema] = {}
    for version in spec["versions"]:
        api_version = f"{spec['group']}/{version['name']}"
        source = version.get("schema", {}).get("openAPIV3Schema")
        if source is None:
            raise ValueError(f"{kind} {version['name']} has no openAPIV3Schema: nothing to validate against")
        root = _own_type(convert(source), api_version, kind)
        properties = root.setdefault("properties", {})
        own = convert({**source.get("properties", {}).get("metadata", {}), "type": "object"}, strict=False)
        properties["metadata"] = {"allOf": [{"$ref": f"#/definitions/{OBJECT_META}"}, own]}
        for name, value in (("apiVersion", api_version), ("kind", kind)):
            properties.setdefault(name, {"type": "string", "enum": [value]})
        files[file_name(kind, api_version)] = {"$schema": DRAFT, **root, "definitions": closure(root, definitions)}
    return files
