"""Whether code steps (code.python, code.wasm) may run in a namespace: the chart's `codeSteps` values.

Code steps run the workflow author's own programs, so they are off until a
cluster admin turns them on, for the whole cluster or for listed namespaces.
The operator asks this when it validates a Workflow (a step naming a code action
where they are off keeps it not Ready, saying how to turn them on), when a run
takes its snapshot, and when a retry reuses an old run's snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DOCS = "docs/code-steps.md"


@dataclass(frozen=True)
class CodeStepPolicy:
    """`codeSteps.enabled` and `codeSteps.namespaces` (empty: every namespace the operator watches; an entry ending
    in `*` is a prefix, e.g. `team-*`)."""

    enabled: bool = False
    namespaces: tuple[str, ...] = ()

    def _listed(self, namespace: str) -> bool:
        return any(namespace.startswith(entry[:-1]) if entry.endswith("*") else namespace == entry
                   for entry in self.namespaces)

    def why_off(self, namespace: str) -> str | None:
        """Why a code step may not run in `namespace`, naming the chart value that changes it; None when it may."""
        if not self.enabled:
            return ("is a code step, and code steps are off in this cluster; a cluster admin turns them on with the "
                    f"chart value codeSteps.enabled=true (helm upgrade --set codeSteps.enabled=true), see {DOCS}")
        if self.namespaces and not self._listed(namespace):
            return (f"is a code step, and code steps are not enabled in namespace {namespace}; a cluster admin adds "
                    f"it to the chart value codeSteps.namespaces, see {DOCS}")
        return None

    def refusals(self, namespace: str, actions: Iterable[str], is_code: set[str]) -> list[str]:
        """One message per code action of `actions` that may not run here."""
        reason = self.why_off(namespace)
        if reason is None:
            return []
        return [f"{action} {reason}" for action in sorted(set(actions) & is_code)]
