"""Every place a resource's spec names a Secret, read off the models rather than kept by hand.

A field names a Secret when its type carries `NAMES_A_SECRET` (`SecretName`, and so `SecretKeyRef.name`, carry
it). The chart's credentials policy must check every path found here against the requesting user's `get`
(tests/integration/attacks/test_attack_secret_references.py tries each one as a user who may not read the
Secret), so a new field that names a Secret cannot be admitted unchecked the way
`approvalNotifications[].credentials` once was.

Paths are written on the wire (camelCase): `[]` steps into a list's items, `{}` into a map's values, e.g.
`spec.steps[].credentials{}` or `spec.triggers[].webhook.verify.secretRef.name`.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from towline.api.common import NamesASecret


def secret_reference_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """The wire paths under `model` whose values name a Secret, in field order."""
    return list(dict.fromkeys(_model_paths(model, prefix, frozenset())))


def described_strings(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, bool]]:
    """(path, description, names a Secret) for every string field under `model` with a description: what a test
    reads to catch a field that says it names a Secret but is not marked as doing so."""
    return list(_described(model, prefix, frozenset()))


def _model_paths(model: type[BaseModel], prefix: str, seen: frozenset[type[BaseModel]]) -> Iterator[str]:
    if model in seen:
        return
    for name, info in model.model_fields.items():
        path = f"{prefix}.{_wire_name(name, info)}" if prefix else _wire_name(name, info)
        if _marked(info.metadata):
            yield path
        yield from _type_paths(info.annotation, path, seen | {model})


def _type_paths(annotation: Any, path: str, seen: frozenset[type[BaseModel]]) -> Iterator[str]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        if _marked(annotation.__metadata__):
            yield path
        yield from _type_paths(args[0], path, seen)
    elif origin in (Union, types.UnionType):
        for arg in args:
            yield from _type_paths(arg, path, seen)
    elif origin in (list, tuple, set, frozenset):
        for arg in args:
            if arg is not Ellipsis:
                yield from _type_paths(arg, f"{path}[]", seen)
    elif origin is dict:
        yield from _type_paths(args[1], f"{path}{{}}", seen)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from _model_paths(annotation, path, seen)


def _described(
    model: type[BaseModel], prefix: str, seen: frozenset[type[BaseModel]],
) -> Iterator[tuple[str, str, bool]]:
    if model in seen:
        return
    for name, info in model.model_fields.items():
        path = f"{prefix}.{_wire_name(name, info)}" if prefix else _wire_name(name, info)
        marked = set(_secret_paths_of(info, path))
        yield from _described_type(info.annotation, path, info.description or "", marked, seen | {model})


def _secret_paths_of(info: FieldInfo, path: str) -> Iterator[str]:
    """The paths at or under one field that name a Secret."""
    if _marked(info.metadata):
        yield path
    yield from _type_paths(info.annotation, path, frozenset())


def _described_type(annotation: Any, path: str, description: str, marked: set[str],
                    seen: frozenset[type[BaseModel]]) -> Iterator[tuple[str, str, bool]]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        inner = next((m.description for m in annotation.__metadata__ if isinstance(m, FieldInfo) and m.description),
                     None)
        yield from _described_type(args[0], path, inner or description, marked, seen)
    elif origin in (Union, types.UnionType):
        for arg in args:
            yield from _described_type(arg, path, description, marked, seen)
    elif origin in (list, tuple, set, frozenset):
        for arg in args:
            if arg is not Ellipsis:
                yield from _described_type(arg, f"{path}[]", description, marked, seen)
    elif origin is dict:
        yield from _described_type(args[1], f"{path}{{}}", description, marked, seen)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from _described(annotation, path, seen)
    elif annotation is str and description:
        yield path, description, path in marked


def _wire_name(name: str, info: FieldInfo) -> str:
    return info.alias or info.serialization_alias or name


def _marked(metadata: Any) -> bool:
    return any(isinstance(item, NamesASecret) for item in metadata)
