"""Every object the chart renders, and every example, is valid for the API server's schemas: kubeconform -strict.

kubeconform (the pinned release, built by `make binaries`) checks each manifest, the chart's CRDs
included, against strict JSON schemas made offline from this Kubernetes release's OpenAPI and from
Towline's CRDs (towline_dev.kubeconform), so a misspelt or misplaced field, a wrong type or a
duplicated key fails here rather than being dropped by the API server or refused at install.
Rendered with the pinned helm, as test_chart.py does; nothing here needs a cluster.

Each check also counts what kubeconform validated against what helm rendered, so it cannot pass by
validating nothing; the kinds that no local schema covers are skipped by name only
(towline_dev.kubeconform.SKIPPED_KINDS), and the last tests prove a broken manifest fails.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.helmsupport import helm, render, template
from tests.yamlread import yaml_documents

from towline_dev.binaries import BinarySet
from towline_dev.kubeconform import (
    CHART_CRDS,
    SKIPPED_KINDS,
    Validation,
    find_kubeconform,
    kubernetes_schema_location,
    validate,
    write_crd_schemas,
)
from towline_dev.release import CHART
from towline_dev.versions import KUBERNETES_VERSION

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
EVERY_OPTIONAL_OBJECT = REPO / "tests" / "fixtures" / "chart" / "every-optional-object.yaml"
SERVICE_MONITORS = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
                    "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
NOTHING_OPTIONAL = {
    "crds.enabled": "false",
    "admissionPolicies.enabled": "false", "networkPolicy.enabled": "false", "ingress.enabled": "false",
    "tests.enabled": "false", "operator.podDisruptionBudget.enabled": "false",
    "rbac.aggregateToDefaultRoles": "false", "archive.enabled": "false",
}
EXAMPLES = sorted((REPO / "examples").rglob("*.yaml"))


class Kubeconform:
    """The pinned kubeconform with the schemas of the pinned Kubernetes and of the chart's CRDs."""

    def __init__(self, binary: Path, locations: list[Path]) -> None:
        self.binary = binary
        self.locations = locations

    def check(self, *paths: Path) -> Validation:
        return validate(self.binary, self.locations, paths)


@pytest.fixture(scope="module")
def kubeconform(tmp_path_factory: pytest.TempPathFactory) -> Kubeconform:
    crds = tmp_path_factory.mktemp("crd-schemas")
    written = write_crd_schemas(sorted(CHART_CRDS.glob("*.yaml")), crds)
    assert written == [f"{kind}-towline-v1alpha1.json" for kind in
                       ("approval", "clustersteptype", "steptype", "workflow", "workflowrun")]
    return Kubeconform(find_kubeconform(), [kubernetes_schema_location(), crds])


def documents_in(path: Path) -> list[dict[str, Any]]:
    return yaml_documents(path.read_text())


def kinds(documents: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter((document["apiVersion"], document["kind"]) for document in documents)


def assert_every_document_checked(result: Validation, documents: list[dict[str, Any]]) -> None:
    """No problem, and kubeconform validated exactly what was rendered, bar the kinds skipped by name."""
    assert result.problems() == []
    assert result.summary["invalid"] == result.summary["errors"] == 0, result.summary
    skipped = [d for d in documents if f"{d['apiVersion']}/{d['kind']}" in SKIPPED_KINDS]
    checked = [d for d in documents if d not in skipped]
    assert Counter(result.counted("statusSkipped")) == Counter((d["kind"], d["metadata"]["name"]) for d in skipped)
    assert Counter(result.counted("statusValid")) == Counter((d["kind"], d["metadata"]["name"]) for d in checked)
    assert result.summary["valid"] == len(checked) > 0, result.summary


def rendered(binaries: BinarySet, directory: Path, values: dict[str, str], *extra: str) -> Path:
    """What `helm install` would apply, the CRDs (templates/crds.yaml, with crds.enabled) included."""
    result = template(binaries, values, *extra)
    assert result.returncode == 0, result.stderr
    path = directory / "rendered.yaml"
    path.write_text(result.stdout)
    return path


@pytest.mark.parametrize("values", [{}, NOTHING_OPTIONAL], ids=["defaults", "nothing-optional"])
def test_the_rendered_chart_is_valid(
    k8s_binaries: BinarySet, kubeconform: Kubeconform, tmp_path: Path, values: dict[str, str],
) -> None:
    path = rendered(k8s_binaries, tmp_path, values)
    documents = documents_in(path)
    assert_every_document_checked(kubeconform.check(path), documents)
    assert kinds(documents)[("apps/v1", "Deployment")] == (3 if not values else 1)
    assert kinds(documents)[("apiextensions.k8s.io/v1", "CustomResourceDefinition")] == (5 if not values else 0)


def test_the_chart_with_every_optional_object_is_valid(
    k8s_binaries: BinarySet, kubeconform: Kubeconform, tmp_path: Path,
) -> None:
    path = rendered(k8s_binaries, tmp_path, {}, "--values", str(EVERY_OPTIONAL_OBJECT), *SERVICE_MONITORS)
    documents = documents_in(path)
    assert_every_document_checked(kubeconform.check(path), documents)
    templates = "\n".join(source.read_text() for source in (CHART / "templates").rglob("*.yaml"))
    written = set(re.findall(r"^kind: (\w+)$", templates, re.M))
    assert written - {kind for _, kind in kinds(documents)} == set(), "a kind the templates write is not rendered"
    operator = next(d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "towline-operator")
    spec = operator["spec"]["template"]["spec"]
    assert {"imagePullSecrets", "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints",
            "priorityClassName"} <= spec.keys()


def test_helm_lint_strict_is_clean_with_every_optional_object(k8s_binaries: BinarySet) -> None:
    """test_chart.py lints the defaults. helm lint cannot be told that the ServiceMonitor and PrometheusRule
    APIs exist (it has no --api-versions), so those objects, which refuse to render without them, stay off."""
    result = helm(k8s_binaries, "lint", str(CHART), "--strict", "--kube-version", KUBERNETES_VERSION,
                  "--values", str(EVERY_OPTIONAL_OBJECT), "--set", "serviceMonitor.enabled=false",
                  "--set", "prometheusRule.enabled=false")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout


def test_the_examples_are_valid_workflows_and_step_types(kubeconform: Kubeconform) -> None:
    documents = [document for example in EXAMPLES for document in documents_in(example)]
    assert {kind for _, kind in kinds(documents)} == {"Workflow", "StepType"}
    assert_every_document_checked(kubeconform.check(*EXAMPLES), documents)


def _misspell(document: dict[str, Any]) -> dict[str, Any]:
    container = document["spec"]["template"]["spec"]["containers"][0]
    container["imagePullPolicyy"] = container.pop("imagePullPolicy")
    return document


BROKEN = {
    "misspelt container field": (_misspell, "additional properties 'imagePullPolicyy' not allowed"),
    "string replicas": (lambda d: {**d, "spec": {**d["spec"], "replicas": "two"}}, "/spec/replicas"),
    "label that is a number": (
        lambda d: {**d, "metadata": {**d["metadata"], "labels": {"tier": 1}}}, "/metadata/labels/tier"),
    "kind without a schema": (lambda d: {**d, "apiVersion": "example.com/v1"}, "could not find schema for Deployment"),
}


@pytest.mark.parametrize("breakage", BROKEN, ids=list(BROKEN))
def test_a_broken_deployment_fails(
    k8s_binaries: BinarySet, kubeconform: Kubeconform, tmp_path: Path, breakage: str,
) -> None:
    """The check can fail: the operator's Deployment, valid as rendered, broken in one place."""
    (deployment,) = [d for d in render(k8s_binaries) if d["metadata"]["name"] == "towline-operator"
                     and d["kind"] == "Deployment"]
    change, expected = BROKEN[breakage]
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(change(deployment)))
    result = kubeconform.check(path)
    assert result.summary["valid"] == 0, result.summary
    (problem,) = result.problems()
    assert expected in problem, problem


def test_a_broken_workflow_or_a_duplicated_key_fails(kubeconform: Kubeconform, tmp_path: Path) -> None:
    example = documents_in(REPO / "examples" / "hello-towline.yaml")[0]
    example["spec"]["stepz"] = example["spec"].pop("steps")
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(example) + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: twice}\n"
                    "data: {key: one, key: two}\n")
    result = kubeconform.check(path)
    assert result.summary == {"valid": 0, "invalid": 1, "errors": 1, "skipped": 0}
    config_map, workflow = sorted(result.problems())
    assert "missing property 'steps'" in workflow and "additional properties 'stepz' not allowed" in workflow
    assert 'key "key" already set in map' in config_map
