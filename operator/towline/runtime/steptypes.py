"""What this process knows of StepTypes and ClusterStepTypes: their bodies as the watches show them.

Validation and a run's first pass ask it for the types a namespace may use
(`available`), and a type's event tells which Workflows to validate again. A type is usable when its spec parses,
its schemas are JSON Schema and its image is allowed; otherwise it is listed
with the reason, which its Ready condition and every Workflow naming it show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from towline.api.steptype import ResolvedStepType
from towline.k8s.indexer import Index, Store
from towline.validation.steptypes import StepImagePolicy, action_of, availability, check_step_type

TypeKey = tuple[str, str]
"""(namespace, name); a ClusterStepType's namespace is ""."""
Checked = ResolvedStepType | list[str]
"""A usable type, or why it cannot be used."""

BY_NAMESPACE: Index[TypeKey, Checked, str] = Index("namespace", lambda key, checked: key[0])
"""A namespace's StepTypes, and under "" every ClusterStepType."""


@dataclass
class StepTypeCache:
    policy: StepImagePolicy
    _checked: Store[TypeKey, Checked] = field(default_factory=lambda: Store(BY_NAMESPACE))

    def saw(self, body: Mapping[str, Any], *, deleted: bool = False) -> TypeKey:
        metadata = body.get("metadata") or {}
        key = (str(metadata.get("namespace") or "") if body.get("kind") != "ClusterStepType" else "",
               str(metadata.get("name", "")))
        if deleted:
            self._checked.pop(key)
        else:
            self._checked.put(key, check_step_type(body, self.policy))
        return key

    def type_keys(self) -> list[TypeKey]:
        return list(self._checked)

    def available(self, namespace: str) -> dict[str, ResolvedStepType | str]:
        """action -> the type, or why it cannot be used, for every type a workflow in `namespace` may name."""
        found: dict[str, ResolvedStepType | str] = {}
        usable = self._checked.by(BY_NAMESPACE, "") + (self._checked.by(BY_NAMESPACE, namespace) if namespace else [])
        for (type_namespace, name), checked in usable:
            action = action_of("ClusterStepType" if type_namespace == "" else "StepType", name)
            found[action] = availability(checked)
        return found
