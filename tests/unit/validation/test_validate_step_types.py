"""User step types in validation: JSON Schema checks of a type and of a step's `with`, the catalog, the image policy."""

from __future__ import annotations

from typing import Any

import pytest

from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.runtime.steptypes import StepTypeCache
from towline.validation import validate_workflow_manifest
from towline.validation.catalog import connector_catalog
from towline.validation.steptypes import (
    StepImagePolicy,
    StepTypeCatalog,
    catalog_from,
    check_step_type,
    input_errors,
    output_errors,
    type_schema_errors,
)

POLICY = StepImagePolicy(allowed_prefixes=("registry.example.com/team/",))
INPUTS = {
    "type": "object",
    "required": ["service", "replicas"],
    "additionalProperties": False,
    "properties": {
        "service": {"type": "string", "minLength": 1},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 50},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "targets": {"type": "array", "items": {"type": "object", "required": ["host"],
                                               "properties": {"host": {"type": "string"}}}},
    },
}
OUTPUTS = {"type": "object", "required": ["revision"], "properties": {"revision": {"type": "integer"}}}


def deploy_type(**changes: Any) -> StepTypeSpec:
    wire = {
        "image": "registry.example.com/team/deploy:1.4.0",
        "inputs": INPUTS,
        "outputs": OUTPUTS,
        "credentials": [{"name": "api", "keys": ["token"]}, {"name": "extra", "keys": ["cert"], "optional": True}],
        "egress": {"ports": [443]},
        "retry": {"limit": 2, "retryOn": ["transient"]},
        **changes,
    }
    return StepTypeSpec.model_validate(wire)


def catalog(**types: StepTypeSpec) -> StepTypeCatalog:
    return StepTypeCatalog(connector_catalog(), {f"steptype/{name}": spec for name, spec in types.items()})


def test_a_type_whose_schema_is_not_json_schema_is_refused_naming_the_field() -> None:
    spec = deploy_type(inputs={"type": "object", "properties": {"n": {"type": "integr"}}})
    [problem] = type_schema_errors(spec)
    assert problem.startswith("spec.inputs.properties.n.type: not a valid JSON Schema (draft 2020-12): ")


def test_a_type_whose_inputs_are_not_an_object_is_refused() -> None:
    assert type_schema_errors(deploy_type(inputs={"type": "array"})) == [
        "spec.inputs: must describe an object (type: object): a step's `with` is a mapping"]
    assert type_schema_errors(deploy_type()) == []


def test_inputs_are_checked_against_the_schema_with_the_field_path() -> None:
    problems = input_errors(INPUTS, {"service": "", "replicas": 80, "targets": [{"port": 1}], "color": "red"})
    assert problems == [
        "with: Additional properties are not allowed ('color' was unexpected)",
        "with.replicas: 80 is greater than the maximum of 50",
        "with.service: '' should be non-empty",
        "with.targets[0]: 'host' is a required property",
    ]


def test_a_binding_counts_as_valid_for_any_field_until_it_resolves() -> None:
    inputs = {"service": "api", "replicas": "${{ params.replicas }}", "labels": "${{ params.labels }}"}
    assert input_errors(INPUTS, inputs) == []
    assert input_errors(INPUTS, inputs, allow_templates=False) == [
        "with.labels: '${{ params.labels }}' is not of type 'object'",
        "with.replicas: '${{ params.replicas }}' is not of type 'integer'",
    ]


def test_a_long_value_is_never_echoed_back() -> None:
    secret = "sk-live-" + "x" * 60
    [problem] = input_errors(INPUTS, {"service": "api", "replicas": secret})
    assert secret not in problem
    assert problem == "with.replicas: the given string is not of type 'integer'"


def test_outputs_are_checked_against_the_output_schema() -> None:
    assert output_errors(OUTPUTS, {"revision": 7}) == []
    assert output_errors(OUTPUTS, {"revision": "seven"}) == ["output.revision: 'seven' is not of type 'integer'"]
    assert output_errors(OUTPUTS, None) == ["output: None is not of type 'object'"]


def test_the_catalog_answers_for_built_ins_and_types_alike() -> None:
    types = catalog(deploy=deploy_type())
    assert "steptype/deploy" in types.known_actions() and "http.request" in types.known_actions()
    assert types.is_mutating("steptype/deploy", {}) is True
    assert types.credential_refs("steptype/deploy", {}) == [("api", "token")]  # the optional slot is not required
    assert types.destination_hosts("steptype/deploy", {}) == [None]  # where it connects is the step's allowHosts
    assert types.connector_ports("steptype/deploy", {}) == [443]
    retry = types.default_retry("steptype/deploy")
    assert retry is not None and (retry.limit, retry.retry_on) == (2, ["transient"])
    assert types.connector_ports("http.request", {"url": "https://example.com:8443/x"}) == [8443]
    assert types.validate_inputs("steptype/missing", {}) == [
        "steptype/missing is not registered; register it (kubectl apply -f its manifest) or fix the name"]


def test_a_workflow_with_a_bad_with_is_not_valid_at_the_field_path() -> None:
    manifest = {"steps": [{
        "id": "roll", "action": "steptype/deploy", "with": {"service": "api", "replicas": "many"},
        "credentials": {"api": "deploy-token"}, "allowHosts": ["deploy.example.com"],
    }]}
    _, errors = validate_workflow_manifest(manifest, catalog(deploy=deploy_type()))
    assert [(e.field, e.message) for e in errors] == [
        ("spec.steps[0].with.replicas", "'many' is not of type 'integer'")]


def test_a_workflow_must_bind_every_required_slot_and_fix_the_hosts_it_may_reach() -> None:
    manifest = {"steps": [{"id": "roll", "action": "steptype/deploy", "with": {"service": "api", "replicas": 2}}]}
    _, errors = validate_workflow_manifest(manifest, catalog(deploy=deploy_type()))
    assert [e.field for e in errors] == ["spec.steps[0].credentials"]
    assert "reads credential 'api' (key 'token')" in errors[0].message
    manifest["steps"][0]["credentials"] = {"api": "deploy-token"}
    _, errors = validate_workflow_manifest(manifest, catalog(deploy=deploy_type()))
    assert [e.field for e in errors] == ["spec.steps[0].allowHosts"]


def test_a_type_that_is_not_usable_is_named_with_its_reason() -> None:
    cache = StepTypeCache(POLICY)
    cache.saw({"kind": "StepType", "metadata": {"namespace": "team", "name": "pwn"},
               "spec": deploy_type(image="docker.io/evil/pwn:latest").model_dump(by_alias=True)})
    manifest = {"steps": [{"id": "x", "action": "steptype/pwn", "with": {}}]}
    _, errors = validate_workflow_manifest(manifest, catalog_from(connector_catalog(), cache.available("team")))
    assert [e.field for e in errors] == ["spec.steps[0].action"]
    assert errors[0].message.startswith("steptype/pwn cannot be used: is not Ready: spec.image: image "
                                        "docker.io/evil/pwn:latest is not allowed for step types")


def test_namespaced_types_are_seen_only_in_their_namespace_and_cluster_types_everywhere() -> None:
    cache = StepTypeCache(POLICY)
    spec = deploy_type().model_dump(by_alias=True)
    cache.saw({"kind": "StepType", "metadata": {"namespace": "team", "name": "deploy", "uid": "u1"}, "spec": spec})
    cache.saw({"kind": "ClusterStepType", "metadata": {"name": "deploy", "uid": "u2"}, "spec": spec})
    assert sorted(cache.available("team")) == ["clustersteptype/deploy", "steptype/deploy"]
    assert sorted(cache.available("other")) == ["clustersteptype/deploy"]
    found = cache.available("team")["steptype/deploy"]
    assert isinstance(found, ResolvedStepType) and (found.kind, found.uid) == ("StepType", "u1")
    cache.saw({"kind": "StepType", "metadata": {"namespace": "team", "name": "deploy"}}, deleted=True)
    assert sorted(cache.available("team")) == ["clustersteptype/deploy"]


@pytest.mark.parametrize(("image", "policy", "problem"), [
    ("registry.example.com/team/deploy:1", POLICY, None),
    ("registry.example.com/teamx/deploy:1", POLICY, "is not allowed for step types"),
    ("registry.example.com/team/deploy:1", StepImagePolicy(), "none are configured"),
    ("registry.example.com/team/deploy:1", StepImagePolicy(("registry.example.com/",), require_digest=True),
     "has no digest and the chart requires one"),
    ("registry.example.com/team/deploy@sha256:" + "a" * 64,
     StepImagePolicy(("registry.example.com/",), require_digest=True), None),
])
def test_the_image_policy(image: str, policy: StepImagePolicy, problem: str | None) -> None:
    found = policy.problem(image)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_check_step_type_reports_a_spec_that_does_not_parse() -> None:
    problems = check_step_type({"kind": "StepType", "metadata": {"name": "x"}, "spec": {"image": "UPPER/case"}},
                               POLICY)
    assert isinstance(problems, list) and len(problems) == 1
    assert problems[0].startswith("spec.image: String should match pattern")


def test_a_step_may_bind_only_its_types_slots() -> None:
    manifest = {"steps": [{
        "id": "roll", "action": "steptype/deploy", "with": {"service": "api", "replicas": 2},
        "credentials": {"api": "deploy-token", "admin": "cluster-admin"}, "allowHosts": ["deploy.example.com"],
    }]}
    _, errors = validate_workflow_manifest(manifest, catalog(deploy=deploy_type()))
    assert [(e.field, e.message) for e in errors] == [(
        "spec.steps[0].credentials.admin",
        "steptype/deploy has no credential slot 'admin'; its slots: api, extra. Bind only those: nothing else is "
        "mounted into its pod",
    )]
