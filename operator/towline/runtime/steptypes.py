"""What this process knows of StepTypes and ClusterStepTypes: their bodies as the watches show them.

Validation asks it for a namespace's catalog (built-ins plus the types usable
there), a run's first pass for the types its steps name, and a type's event
for the Workflows to validate again. A type is usable when its spec parses,
its schemas are JSON Schema and its image is allowed; otherwise it is listed
with the reason, which its Ready condition and every Workflow naming it show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from towline.api.steptype import (
    CLUSTER_STEP_TYPE_PREFIX,
    STEP_TYPE_PREFIX,
    ResolvedStepType,
    StepTypeKind,
    StepTypeSpec,
)
from towline.validation.steptypes import BuiltinCatalog, StepImagePolicy, StepTypeCatalog, type_schema_errors

TypeKey = tuple[str, str]
"""(namespace, name); a ClusterStepType's namespace is ""."""


def action_of(kind: StepTypeKind, name: str) -> str:
    """How a workflow step names the type: `steptype/<name>` or `clustersteptype/<name>`."""
    return f"{STEP_TYPE_PREFIX if kind == 'StepType' else CLUSTER_STEP_TYPE_PREFIX}{name}"


def check_step_type(body: Mapping[str, Any], policy: StepImagePolicy) -> ResolvedStepType | list[str]:
    """The type as a run would snapshot it, or every reason it cannot be used (each names the field)."""
    kind: StepTypeKind = "ClusterStepType" if body.get("kind") == "ClusterStepType" else "StepType"
    metadata = body.get("metadata") or {}
    try:
        spec = StepTypeSpec.model_validate(body.get("spec") or {})
    except ValidationError as error:
        return [f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5]]
    problems = type_schema_errors(spec)
    image_problem = policy.problem(spec.image)
    if image_problem:
        problems.append(f"spec.image: {image_problem}")
    if problems:
        return problems
    return ResolvedStepType(kind=kind, name=str(metadata.get("name", "")), uid=metadata.get("uid"),
                            generation=metadata.get("generation"), spec=spec)


@dataclass
class StepTypeCache:
    policy: StepImagePolicy
    _checked: dict[TypeKey, ResolvedStepType | list[str]] = field(default_factory=dict)

    def saw(self, body: Mapping[str, Any], *, deleted: bool = False) -> TypeKey:
        metadata = body.get("metadata") or {}
        key = (str(metadata.get("namespace") or "") if body.get("kind") != "ClusterStepType" else "",
               str(metadata.get("name", "")))
        if deleted:
            self._checked.pop(key, None)
        else:
            self._checked[key] = check_step_type(body, self.policy)
        return key

    def type_keys(self) -> list[TypeKey]:
        return list(self._checked)

    def problems(self, key: TypeKey) -> list[str] | None:
        """Why the type is not usable; [] when it is, None when no such type is known."""
        found = self._checked.get(key)
        if found is None:
            return None
        return [] if isinstance(found, ResolvedStepType) else found

    def available(self, namespace: str) -> dict[str, ResolvedStepType | str]:
        """action -> the type, or why it cannot be used, for every type a workflow in `namespace` may name."""
        found: dict[str, ResolvedStepType | str] = {}
        for (type_namespace, name), checked in self._checked.items():
            if type_namespace not in ("", namespace):
                continue
            action = action_of("ClusterStepType" if type_namespace == "" else "StepType", name)
            found[action] = checked if isinstance(checked, ResolvedStepType) else (
                "is not Ready: " + "; ".join(checked))
        return found

    def catalog_for(self, namespace: str, builtins: BuiltinCatalog) -> StepTypeCatalog:
        available = self.available(namespace)
        usable = {action: t.spec for action, t in available.items() if isinstance(t, ResolvedStepType)}
        unusable = {action: reason for action, reason in available.items() if isinstance(reason, str)}
        return StepTypeCatalog(builtins, usable, unusable)
