"""The generated StepType: exactly the spec fields of the shared design, with schemas the code really honours.

STEPTYPE_SCHEMA is written from the field list of the StepTypes design (spec
camelCase on the wire), independently of the operator's model, so a field the
generator invents or misspells fails here.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel
from stepkit_testkit import GREETER_DIR, StepPod

from towline_step import Context, CredentialSlot, step
from towline_step.manifest import build_manifest, main, to_yaml

_STRINGS = {"type": "array", "items": {"type": "string"}}
_CPU_MEMORY = {"type": "object", "additionalProperties": False,
               "properties": {"cpu": {"type": ["string", "number"]}, "memory": {"type": "string"}}}
STEPTYPE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "towline.dev/v1alpha1"},
        "kind": {"enum": ["StepType", "ClusterStepType"]},
        "metadata": {"type": "object", "required": ["name"],
                     "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}}},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["image", "inputs", "outputs"],
            "properties": {
                "description": {"type": "string"},
                "image": {"type": "string", "minLength": 1},
                "command": _STRINGS,
                "args": _STRINGS,
                "inputs": {"type": "object", "required": ["type"], "properties": {"type": {"const": "object"}}},
                "outputs": {"type": "object"},
                "credentials": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False, "required": ["name", "keys"],
                    "properties": {"name": {"type": "string", "pattern": "^[a-z][a-z0-9_-]*$"},
                                   "keys": {**_STRINGS, "minItems": 1}, "description": {"type": "string"},
                                   "optional": {"type": "boolean"}},
                }},
                "egress": {"type": "object", "additionalProperties": False, "properties": {
                    "ports": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 65535}},
                }},
                "resources": {"type": "object", "additionalProperties": False,
                              "properties": {"requests": _CPU_MEMORY, "limits": _CPU_MEMORY}},
                "timeoutSeconds": {"type": "integer", "minimum": 1},
                "retry": {"type": "object", "additionalProperties": False, "properties": {
                    "limit": {"type": "integer"}, "backoff": {"type": "string"},
                    "baseDelaySeconds": {"type": "number"}, "maxDelaySeconds": {"type": "number"},
                    "retryOn": _STRINGS,
                }},
                "idempotencyKey": {"type": "boolean"},
                "mutating": {"type": "boolean"},
            },
        },
    },
}


class Query(BaseModel):
    sql: str
    limit: int = 100


class Rows(BaseModel):
    rows: list[dict[str, Any]]


@step(name="warehouse-query", image="registry.example/query:2", command=["/bin/query"], args=["--json"],
      credentials=[CredentialSlot("db", ("user", "password"), "Read-only warehouse login.")], egress_ports=[5432],
      timeout_seconds=120, retry={"limit": 3, "backoff": "exponential", "retryOn": ["transient"]},
      resources={"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
      idempotency_key=False, mutating=False)
def query(inputs: Query, ctx: Context) -> Rows:
    """Runs a read-only query."""
    return Rows(rows=[])


@pytest.fixture
def greeter(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(GREETER_DIR))
    import greeter  # noqa: PLC0415  # the example is importable from its own directory only

    return greeter


def conforms(manifest: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(STEPTYPE_SCHEMA).validate(manifest)
    for field in ("inputs", "outputs"):
        jsonschema.Draft202012Validator.check_schema(manifest["spec"][field])


def test_a_step_with_every_field_set_yields_each_field_of_the_design(greeter: Any) -> None:
    manifest = build_manifest(query, namespace="data")
    conforms(manifest)
    assert manifest["metadata"] == {"name": "warehouse-query", "namespace": "data"}
    spec = manifest["spec"]
    assert list(spec) == ["description", "image", "command", "args", "inputs", "outputs", "credentials", "egress",
                          "resources", "timeoutSeconds", "retry", "idempotencyKey", "mutating"]
    assert spec["credentials"] == [{"name": "db", "keys": ["user", "password"],
                                    "description": "Read-only warehouse login."}]
    assert (spec["egress"], spec["timeoutSeconds"], spec["mutating"]) == ({"ports": [5432]}, 120, False)


def test_optional_fields_are_left_out_when_the_step_does_not_set_them(greeter: Any) -> None:
    spec = build_manifest(greeter.greet)["spec"]
    assert not {"command", "args", "resources", "retry"} & set(spec)
    conforms(build_manifest(greeter.greet))


def test_the_manifest_round_trips_through_yaml_and_json(greeter: Any, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = build_manifest(query, kind="ClusterStepType", image="registry.example/query@sha256:" + "a" * 64)
    assert yaml.safe_load(to_yaml(manifest, "m:query")) == manifest
    assert manifest["spec"]["image"].endswith("a" * 64)
    assert main(["greeter:greet", "--json", "--namespace", "team"]) == 0
    printed = json.loads(capsys.readouterr().out)
    conforms(printed)
    assert printed == build_manifest(greeter.greet, namespace="team")


def test_the_input_schema_accepts_what_the_model_accepts_and_refuses_the_rest(greeter: Any) -> None:
    validator = jsonschema.Draft202012Validator(build_manifest(greeter.greet)["spec"]["inputs"])
    assert validator.is_valid({"name": "Ada", "fail": "transient", "connect": "192.0.2.10:443"})
    for refused in ({}, {"name": ""}, {"name": "Ada", "fail": "sometimes"}, {"name": "Ada", "extra": 1},
                    {"name": "Ada", "connect": "no port"}):
        assert not validator.is_valid(refused), refused


def test_what_main_writes_validates_against_the_output_schema(greeter: Any, pod: StepPod) -> None:
    pod.given({"name": "Ada"}).credential("api", "token", "t-123456789")
    assert greeter.greet.main(pod.env) == 0
    output = pod.read().output
    jsonschema.Draft202012Validator(build_manifest(greeter.greet)["spec"]["outputs"]).validate(output)
    assert output["idempotencyKey"] == "run-uid-step-1" and output["hadToken"] is True


def test_a_cluster_step_type_takes_no_namespace_and_kinds_are_the_two_of_the_design() -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        build_manifest(query, kind="ClusterStepType", namespace="data")
    with pytest.raises(ValueError, match="StepType, ClusterStepType"):
        build_manifest(query, kind="Task")


@pytest.mark.parametrize(("target", "says"), [
    ("greeter", "name the step as <module>:<attribute>"),
    ("greeter:Inputs", "greeter:Inputs is a ModelMetaclass, not a function decorated with @step"),
    ("no_such_module_here:greet", "No module named 'no_such_module_here'"),
])
def test_a_target_that_is_not_a_step_is_refused(greeter: Any, capsys: pytest.CaptureFixture[str],
                                                target: str, says: str) -> None:
    assert main([target]) == 2
    assert says in capsys.readouterr().err


def test_the_greeter_examples_steptype_yaml_is_what_its_code_generates(greeter: Any) -> None:
    checked_in = (GREETER_DIR / "steptype.yaml").read_text()
    assert checked_in == to_yaml(build_manifest(greeter.greet), "greeter:greet"), (
        "examples/step-types/greeter-python/steptype.yaml is stale; regenerate it in that directory with "
        "`python -m towline_step.manifest greeter:greet > steptype.yaml`"
    )

