"""Turn a pydantic model's JSON Schema into a Kubernetes structural OpenAPI v3 schema.

The API server accepts only "structural" schemas: every node typed, no `$ref`,
no `anyOf` carrying types, no `additionalProperties` next to `properties`. This
module rewrites what pydantic emits into that form and refuses (raises
`SchemaError`) anything it cannot translate faithfully, so a model change never
loses a constraint silently.

Defaults stay out of the CRD on purpose: the API server would write them into
stored objects, and a GitOps tool would see fields nobody committed. They go
into the field's description instead (`kubectl explain` shows it); the operator
applies them when it parses the object.

Every node needs a description (a field's own, its type's, or its model's
docstring): a field, an array's items, a map's values, in spec and status
alike. A node without one is refused, all of them named in one error, so
`kubectl explain` can never lose a field's explanation to a model change.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from towline.api.common import API_VERSION

Schema = dict[str, Any]


class SchemaError(ValueError):
    """A model uses a JSON Schema construct a CRD cannot express; the message names the field."""


_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_VALIDATIONS = "x-kubernetes-validations"

_KEY_ORDER = (
    "description", "type", "format", "enum", "pattern",
    "minLength", "maxLength", "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum",
    "minItems", "maxItems", "minProperties", "maxProperties",
    "required", "properties", "additionalProperties", "items",
    _PRESERVE, "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type", _VALIDATIONS,
)
_COPIED = frozenset(_KEY_ORDER) - {"description", "properties", "additionalProperties", "items", _VALIDATIONS}
_IGNORED = frozenset({"title", "default", "examples", "$defs"})
_CONSUMED = frozenset({"$ref", "anyOf", "allOf", "const", "propertyNames", "patternProperties", "description",
                       "properties", "additionalProperties", "items", _VALIDATIONS,
                       "exclusiveMinimum", "exclusiveMaximum"})


def structural_schema(model: type[BaseModel]) -> Schema:
    """The `openAPIV3Schema` of a resource model: spec and status as the model says, standard envelope."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    envelope = {"apiVersion", "kind", "metadata"}
    raw["properties"] = {name: child for name, child in raw["properties"].items() if name not in envelope}
    undescribed: list[str] = []
    schema = _convert(raw, defs, path=model.__name__, undescribed=undescribed)
    if undescribed:
        raise SchemaError(
            f"{model.__name__}: {len(undescribed)} field(s) without a description (`kubectl explain` would show "
            f"nothing): {', '.join(undescribed)}; give each a Field(description=...) saying what it does and how "
            "it is used"
        )
    properties = schema["properties"]
    properties["apiVersion"] = {"description": f"Always {API_VERSION}.", "type": "string"}
    properties["kind"] = {"description": f"Always {model.__name__}.", "type": "string"}
    # A resource's name is the value of a label on everything made for it (towline.dev/workflow,
    # towline.dev/run), and a label value holds at most 63 characters: a longer name is refused here,
    # where the user sees why, instead of failing every Job the operator would create.
    # Nothing else may be said of metadata, not even a description: the API server refuses a CRD whose
    # metadata schema holds more than name and generateName (kubectl explain shows ObjectMeta's own text).
    properties["metadata"] = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 63}}}
    schema["required"] = [name for name in schema.get("required", []) if name not in envelope]
    if "status" in properties:
        # Only the operator writes status, from specs the rules already checked: rules
        # there would re-check nothing and spend the CRD's CEL cost budget.
        properties["status"] = _without_rules(properties["status"])
    return schema


def _convert(node: Schema, defs: Schema, path: str, undescribed: list[str]) -> Schema:
    """One node, converted; the paths of nodes without a description are appended to `undescribed`."""
    node = _flatten(node, defs, path)
    unknown = set(node) - _COPIED - _IGNORED - _CONSUMED
    if unknown:
        raise SchemaError(f"{path}: JSON Schema keyword(s) {sorted(unknown)} have no CRD equivalent")

    out: Schema = {key: node[key] for key in _COPIED if key in node}
    if "const" in node:
        out["enum"] = [node["const"]]
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):
        if bound in node:  # JSON Schema 2020-12 numbers become OpenAPI 3.0 flags
            out["minimum" if bound == "exclusiveMinimum" else "maximum"] = node[bound]
            out[bound] = True
    if not str(node.get("description", "")).strip():
        undescribed.append(path)  # "Defaults to 0." alone says nothing of what the field does
    description = _description(node)
    if description:
        out["description"] = description
    if "properties" in node:
        out["properties"] = {
            name: _convert(child, defs, f"{path}.{name}", undescribed) for name, child in node["properties"].items()
        }
    if "items" in node:
        out["items"] = _convert(node["items"], defs, f"{path}[]", undescribed)
    rules = [_ordered_rule(rule, path) for rule in node.get(_VALIDATIONS, [])]
    extra = node.get("additionalProperties")
    if "patternProperties" in node or "propertyNames" in node:
        key_pattern, extra = _key_constraint(node, path)
        rules.append(_key_rule(key_pattern, node.get("propertyNames", {}).get("maxLength", 253)))
    if isinstance(extra, dict) and not node.get(_PRESERVE):
        out["additionalProperties"] = _convert(extra, defs, f"{path}.*", undescribed)
    if rules:
        out[_VALIDATIONS] = rules

    _check_structural(out, path)
    return _ordered(out)


def _flatten(node: Schema, defs: Schema, path: str) -> Schema:
    """Inline `$ref`, unwrap `anyOf [X, null]` and single `allOf`; the outer node's keys win."""
    node = dict(node)
    while True:
        if "$ref" in node:
            target = _resolve(node.pop("$ref"), defs, path)
        elif "allOf" in node and len(node["allOf"]) == 1:
            target = node.pop("allOf")[0]
        elif "anyOf" in node:
            branches = [b for b in node.pop("anyOf") if b != {"type": "null"}]
            if len(branches) != 1:
                raise SchemaError(f"{path}: a union of several types cannot be a structural schema; use one type")
            target = branches[0]
        else:
            return node
        rules = list(target.get(_VALIDATIONS, [])) + list(node.get(_VALIDATIONS, []))
        node = {**target, **node}
        if rules:
            node[_VALIDATIONS] = rules


def _resolve(ref: str, defs: Schema, path: str) -> Schema:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix):] not in defs:
        raise SchemaError(f"{path}: cannot resolve {ref}")
    resolved: Schema = defs[ref[len(prefix):]]
    return resolved


def _description(node: Schema) -> str:
    text = " ".join(str(node.get("description", "")).split())
    default = node.get("default")
    if default not in (None, "", [], {}):
        suffix = f"Defaults to {json.dumps(default)}."
        text = f"{text} {suffix}" if text else suffix
    return text


def _key_constraint(node: Schema, path: str) -> tuple[str, Any]:
    """A map with constrained keys: pydantic's `patternProperties`/`propertyNames` as (key pattern, values)."""
    patterned = node.get("patternProperties", {})
    names = node.get("propertyNames", {})
    if len(patterned) > 1 or set(names) - {"pattern", "maxLength", "type"}:
        raise SchemaError(f"{path}: only one pattern and a length can constrain map keys")
    if patterned:
        [(pattern, values)] = patterned.items()
        return pattern, values
    if "pattern" not in names:
        return ".*", node.get("additionalProperties")
    return names["pattern"], node.get("additionalProperties")


def _key_rule(pattern: str, max_length: int) -> dict[str, str]:
    return {
        "rule": f"self.all(k, size(k) <= {max_length} && k.matches(r'{pattern}'))",
        "message": f"every key must match {pattern}, at most {max_length} characters",
    }


def _check_structural(out: Schema, path: str) -> None:
    preserve = out.get(_PRESERVE, False)
    if "type" not in out and not preserve:
        raise SchemaError(f"{path}: has no type; give it one or mark it x-kubernetes-preserve-unknown-fields")
    if (
        out.get("type") == "object"
        and not preserve
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        raise SchemaError(
            f"{path}: a free-form object would be pruned empty by the API server; "
            "mark it x-kubernetes-preserve-unknown-fields or give its values a type"
        )


def _without_rules(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _without_rules(value) for key, value in node.items() if key != _VALIDATIONS}
    if isinstance(node, list):
        return [_without_rules(item) for item in node]
    return node


def _ordered_rule(rule: Schema, path: str) -> Schema:
    order = ("rule", "messageExpression", "message", "fieldPath", "reason", "optionalOldSelf")
    if set(rule) - set(order) or "rule" not in rule:
        raise SchemaError(f"{path}: a CEL validation has a rule and only the keys {', '.join(order[1:])}")
    return {key: rule[key] for key in order if key in rule}


def _ordered(out: Schema) -> Schema:
    position = {key: index for index, key in enumerate(_KEY_ORDER)}
    return {key: out[key] for key in sorted(out, key=lambda k: (position.get(k, len(position)), k))}
