"""`kubectl explain` against the real API server shows every Towline field's description and default.

The API server publishes the CRDs' schemas as OpenAPI; kubectl reads them back. The expected text
is taken from the generated CRDs, so what is checked is that the description the models give
reaches a person who types `kubectl explain`, deep paths included.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.support import wait_for
from tests.yamlread import generated_crds

from towline.api.common import API_VERSION
from towline_dev.controlplane import ControlPlane

pytestmark = pytest.mark.integration

CRDS = generated_crds()

# (resource, field path as kubectl explain takes it); arrays are stepped through, as kubectl does.
DEEP_FIELDS = [
    ("workflows", "spec.steps.with"),
    ("workflows", "spec.steps.retry.retryOn"),
    ("workflows", "spec.steps.approval.expiresAfter"),
    ("workflows", "spec.triggers.webhook.verify.secretRef.key"),
    ("workflows", "spec.finally.timeoutSeconds"),
    ("workflows", "spec.policy.history.succeeded"),
    ("workflows", "status.lastRun.phase"),
    ("workflowruns", "spec.retryOf.reuse"),
    ("workflowruns", "status.steps.history.image"),
    ("workflowruns", "status.workflowSpec"),  # opaque to the API server: its description points at workflow.spec
    ("workflows", "spec.steps.egress.ports"),
    ("approvals", "spec.expiresAt"),
    ("approvals", "status.decidedAt"),
    ("steptypes", "spec.resources.limits.memory"),
    ("clustersteptypes", "spec.credentials.keys"),
    ("workflows", "spec.outputs"),
    ("workflowruns", "status.outputs"),
    ("workflows", "spec.steps.forEach.maxParallel"),
    ("workflows", "spec.steps.forEach.items"),
    ("workflowruns", "status.steps.loop.count"),
]


def description(plural: str, path: str) -> str:
    """The generated CRD's description of `path`, stepping into array items like kubectl explain."""
    node: dict[str, Any] = CRDS[f"{plural}.towline.dev.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for name in path.split(".") if path else []:
        if node.get("type") == "array":
            node = node["items"]
        node = node["properties"][name]
    text: str = node["description"]
    return text


def words(text: str) -> str:
    """kubectl wraps descriptions to the terminal: compare word by word."""
    return " ".join(text.split())


def explain(plane: ControlPlane, plural: str, path: str, expected: str = "") -> str:
    """kubectl explain's output, word by word; "" until it holds `expected` (the API server publishes
    a CRD's OpenAPI shortly after the CRD is Established, so callers wait for it)."""
    target = f"{plural}.{path}" if path else plural
    result = plane.kubectl("explain", target, f"--api-version={API_VERSION}", check=False)
    shown = words(result.stdout) if result.returncode == 0 else ""
    return shown if expected in shown else ""


@pytest.mark.parametrize(("plural", "path"), DEEP_FIELDS, ids=lambda value: value)
def test_kubectl_explain_shows_a_deep_fields_description(crds_installed: ControlPlane, plural: str, path: str) -> None:
    expected = words(description(plural, path))
    shown = wait_for(f"kubectl explain {plural}.{path} to show {expected!r}",
                     lambda: explain(crds_installed, plural, path, expected))
    assert f"FIELD: {path.rsplit('.', 1)[-1]}" in shown


def test_kubectl_explain_shows_defaults(crds_installed: ControlPlane) -> None:
    expected = "Extra attempts after the first. Defaults to 0."
    shown = wait_for("kubectl explain to show retry.limit's default",
                     lambda: explain(crds_installed, "workflows", "spec.steps.retry", expected))
    assert "limit <integer> Extra attempts after the first. Defaults to 0." in shown
    assert 'Defaults to "exponential".' in shown and "Defaults to [transient, rate_limit, timeout]." in shown


@pytest.mark.parametrize("plural", ["workflows", "workflowruns", "approvals", "steptypes", "clustersteptypes"])
def test_kubectl_explain_describes_each_resource(crds_installed: ControlPlane, plural: str) -> None:
    expected = words(description(plural, ""))
    shown = wait_for(f"kubectl explain {plural} to show {expected!r}",
                     lambda: explain(crds_installed, plural, "", expected))
    assert words(description(plural, "spec")) in shown
