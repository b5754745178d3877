"""The schemas kubeconform checks the chart with (towline_dev.jsonschemas): named as kubeconform looks them up,
strict where the API server knows every field, open where the keys are the user's.

Checked here with the jsonschema library's draft-4 validator (kubeconform compiles them as draft 4) on a
small OpenAPI document of the same shape as Kubernetes' and on the chart's own Workflow CRD;
tests/integration/test_chart_conformance.py runs kubeconform itself over the rendered chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from towline_dev.jsonschemas import crd_schemas, file_name, kubernetes_schemas

REPO = Path(__file__).parents[3]
META = "io.k8s.apimachinery.pkg.apis.meta.v1"

OPENAPI: dict[str, Any] = {"definitions": {
    f"{META}.ObjectMeta": {"type": "object", "properties": {
        "name": {"type": "string"}, "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    }},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
    "io.k8s.api.example.v1.Thing": {
        "description": "A kind of the example.com group.",
        "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "Thing"}],
        "type": "object", "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"$ref": f"#/definitions/{META}.ObjectMeta", "description": "dropped"},
            "spec": {"$ref": "#/definitions/io.k8s.api.example.v1.ThingSpec"},
        },
    },
    "io.k8s.api.example.v1.ThingSpec": {"type": "object", "required": ["size"], "properties": {
        "size": {"type": "integer"},
        "port": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
        "memory": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"},
        "tree": {"$ref": "#/definitions/io.k8s.api.example.v1.Tree"},
        "raw": {"type": "object"},
    }},
    "io.k8s.api.example.v1.Tree": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/definitions/io.k8s.api.example.v1.Tree"}},
    }},
}}


def errors(schema: dict[str, Any], document: Any) -> list[str]:
    validator = jsonschema.Draft4Validator(schema)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document))


@pytest.mark.parametrize(("kind", "api_version", "expected"), [
    ("Deployment", "apps/v1", "deployment-apps-v1.json"),
    ("Pod", "v1", "pod-v1.json"),
    ("ClusterRole", "rbac.authorization.k8s.io/v1", "clusterrole-rbac-v1.json"),
    ("ValidatingAdmissionPolicy", "admissionregistration.k8s.io/v1",
     "validatingadmissionpolicy-admissionregistration-v1.json"),
    ("WorkflowRun", "towline.dev/v1alpha1", "workflowrun-towline-v1alpha1.json"),
])
def test_files_are_named_as_kubeconform_looks_them_up(kind: str, api_version: str, expected: str) -> None:
    """kubeconform's `{{ .ResourceKind }}{{ .KindSuffix }}.json`: the group's first label, lowercased."""
    assert file_name(kind, api_version) == expected


def test_a_kind_is_strict_but_maps_and_untyped_objects_stay_open() -> None:
    (name, schema), = kubernetes_schemas(OPENAPI).items()
    assert name == "thing-example-v1.json"
    thing: dict[str, Any] = {"apiVersion": "example.com/v1", "kind": "Thing",
             "metadata": {"name": "a", "labels": {"any-key": "x"}, "namespace": None},
             "spec": {"size": 1, "port": "http", "memory": 1.5, "raw": {"anything": [1]},
                      "tree": {"children": [{"children": [{}]}]}}}
    assert errors(schema, thing) == []
    assert errors(schema, {**thing, "spec": {**thing["spec"], "port": 8080, "memory": "1Gi", "tree": None}}) == []
    assert errors(schema, {**thing, "spec": {"size": 1, "sise": 2}}) == [
        "spec: Additional properties are not allowed ('sise' was unexpected)"]
    assert errors(schema, {**thing, "metadata": {"nmae": "a"}}) == [
        "metadata: Additional properties are not allowed ('nmae' was unexpected)"]
    assert errors(schema, {**thing, "spec": {"size": 1, "tree": {"children": [{"leaves": 1}]}}}) == [
        "spec/tree/children/0: Additional properties are not allowed ('leaves' was unexpected)"]
    assert errors(schema, {**thing, "extra": 1}) == [": Additional properties are not allowed ('extra' was unexpected)"]
    assert errors(schema, {**thing, "spec": {"size": None}}) == ["spec/size: None is not of type 'integer'"]
    assert errors(schema, {**thing, "apiVersion": "example.com/v2"}) == [
        "apiVersion: 'example.com/v2' is not one of ['example.com/v1']"]
    assert "description" not in str(schema)


def test_two_kinds_kubeconform_could_not_tell_apart_are_refused() -> None:
    twin = {**OPENAPI["definitions"]["io.k8s.api.example.v1.Thing"],
            "x-kubernetes-group-version-kind": [{"group": "example.org", "version": "v1", "kind": "Thing"}]}
    openapi = {"definitions": {**OPENAPI["definitions"], "org.example.v1.Thing": twin}}
    with pytest.raises(ValueError, match=r"would both be thing-example-v1\.json"):
        kubernetes_schemas(openapi)


def test_a_crd_schema_checks_the_resource_and_its_object_meta() -> None:
    crd = yaml.safe_load((REPO / "crds" / "workflows.towline.dev.yaml").read_text())
    (name, schema), = crd_schemas(crd, OPENAPI).items()
    assert name == "workflow-towline-v1alpha1.json"
    example = yaml.safe_load((REPO / "examples" / "hello-towline.yaml").read_text())
    assert errors(schema, example) == []
    example["metadata"]["labels"] = {"team": "a"}
    assert errors(schema, example) == []
    assert errors(schema, {**example, "metadata": {"name": "x" * 64}}) == [
        f"metadata/name: '{'x' * 64}' is too long"]
    assert errors(schema, {**example, "metadata": {"name": "a", "label": {}}}) == [
        "metadata: Additional properties are not allowed ('label' was unexpected)"]
    spec = {key: value for key, value in example["spec"].items() if key != "steps"}
    assert errors(schema, {**example, "spec": {**spec, "step": []}}) == [
        "spec: 'steps' is a required property",
        "spec: Additional properties are not allowed ('step' was unexpected)"]


def test_crd_extensions_keep_their_meaning() -> None:
    crd = {"spec": {"group": "towline.dev", "names": {"kind": "Probe"}, "versions": [{"name": "v1", "schema": {
        "openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"a": {}}},
            "port": {"x-kubernetes-int-or-string": True},
            "note": {"type": "string", "nullable": True},
            "object": {"type": "object", "x-kubernetes-embedded-resource": True,
                       "properties": {"spec": {"type": "object"}}},
        }}}}}}]}}
    (schema,) = crd_schemas(crd, OPENAPI).values()
    probe: dict[str, Any] = {"apiVersion": "towline.dev/v1", "kind": "Probe", "metadata": {"name": "p"},
             "spec": {"free": {"a": 1, "b": 2}, "port": 80, "note": None,
                      "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "spec": {}}}}
    assert errors(schema, probe) == []
    assert errors(schema, {**probe, "spec": {**probe["spec"], "port": "http"}}) == []
    assert errors(schema, {**probe, "spec": {**probe["spec"], "port": 1.5}}) != []
    assert errors(schema, {**probe, "spec": {**probe["spec"], "object": {"data": {}}}}) == [
        "spec/object: Additional properties are not allowed ('data' was unexpected)"]
