"""A schedule trigger suspended by a person (`kubectl towline schedule suspend`), not by its Workflow's git.

The switch is one annotation per trigger on the Workflow, `suspend.towline.dev/<trigger>: "true"`, written with
its own field manager (FIELD_MANAGER): a key that git never sets, so a GitOps tool applying the Workflow leaves it
alone (Argo CD shows no drift once told to ignore that manager; docs/operating.md, "Suspending a schedule"). An
annotation, not a spec field: it changes when slots fire, not what the Workflow is, so the Workflow's generation,
its runs' snapshots and `retry --workflow-changed`'s comparison do not move. Standard library only: the plugin
reads it too.
"""

from __future__ import annotations

from collections.abc import Mapping

SUSPEND_PREFIX = "suspend.towline.dev/"
SUSPENDED = "true"
FIELD_MANAGER = "kubectl-towline-schedule"
"""The field manager the plugin writes the switch with (Argo CD's ignoreDifferences names it)."""


def suspend_annotation(trigger: str) -> str:
    """The annotation key that suspends `trigger` (a trigger name is an identifier: a valid key name)."""
    return SUSPEND_PREFIX + trigger


def suspended_triggers(annotations: Mapping[str, str] | None) -> frozenset[str]:
    """The triggers the annotations suspend (the value "true"; any other value suspends nothing)."""
    return frozenset(key[len(SUSPEND_PREFIX):] for key, value in (annotations or {}).items()
                     if key.startswith(SUSPEND_PREFIX) and value == SUSPENDED)
