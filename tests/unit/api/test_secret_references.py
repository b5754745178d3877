"""Where a spec names a Secret comes from the models, and a credential alias has one pattern everywhere.

The chart's credentials policies are tried against every path `secret_reference_paths` finds on the real API
server (tests/integration/attacks/test_attack_secret_references.py); these tests keep the marking honest (a
field that says it holds a Secret's name is marked as naming one) and the slot/alias pattern single.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from towline.api.common import IDENTIFIER_PATTERN
from towline.api.crdgen import RESOURCES, custom_resource_definition
from towline.api.secretrefs import described_strings, secret_reference_paths
from towline.api.steptype import SLOT_PATTERN, StepTypeSpec
from towline.validation.steptypes import StepImagePolicy, check_step_type
from towline_step.protocol import CREDENTIAL_SLOT_PATTERN

SECRET_KEYS_NOT_NAMES = {
    "spec.triggers[].webhook.verify.secretRef.key": "the key within the Secret its name names",
    "spec.triggers[].webhook.verify.publicKeyRef.key": "the key within the Secret its name names",
    "spec.triggers[].cloudEvent.verify.secretRef.key": "the key within the Secret its name names",
    "spec.triggers[].cloudEvent.verify.publicKeyRef.key": "the key within the Secret its name names",
    "spec.credentials[].keys[]": "keys a slot reads of whatever Secret a step binds to it",
}
"""String fields whose description speaks of a Secret but which hold no Secret's name, and why."""


def spec_model(kind: str) -> Any:
    resource = next(r for r in RESOURCES if r.kind == kind)
    return resource.model.model_fields["spec"].annotation


def test_the_walk_finds_every_field_that_names_a_secret_and_only_those() -> None:
    assert secret_reference_paths(spec_model("Workflow"), "spec") == [
        "spec.triggers[].webhook.verify.secretRef.name", "spec.triggers[].webhook.verify.publicKeyRef.name",
        "spec.triggers[].cloudEvent.verify.secretRef.name", "spec.triggers[].cloudEvent.verify.publicKeyRef.name",
        "spec.steps[].credentials{}", "spec.finally[].credentials{}", "spec.compensations[].credentials{}",
        "spec.approvalNotifications[].credentials{}",
    ]
    assert secret_reference_paths(spec_model("StepType"), "spec") == ["spec.imagePullSecrets[]"]
    assert secret_reference_paths(spec_model("WorkflowRun"), "spec") == []


@pytest.mark.parametrize("kind", [r.kind for r in RESOURCES])
def test_a_string_field_that_speaks_of_a_secret_is_marked_as_naming_one(kind: str) -> None:
    unmarked = [(path, description) for path, description, marked in described_strings(spec_model(kind), "spec")
                if re.search(r"\bSecret", description) and not marked and path not in SECRET_KEYS_NOT_NAMES]
    assert unmarked == [], (
        "these fields say they hold a Secret but are not marked NAMES_A_SECRET, so no admission check covers "
        "them: use SecretName (or add NAMES_A_SECRET to the type) and cover the path in the chart's policy: "
        f"{unmarked}")


def credential_key_patterns(crd: dict[str, Any]) -> set[str]:
    """Every pattern the CRD holds a credentials map's keys to (its CEL key rule), anywhere in the schema."""
    found: set[str] = set()

    def walk(node: Any, name: str = "") -> None:
        if isinstance(node, dict):
            if name == "credentials" and node.get("type") == "object":
                for rule in node.get("x-kubernetes-validations", []):
                    found.update(re.findall(r"k\.matches\(r'([^']+)'\)", rule["rule"]))
            for key, child in node.items():
                walk(child, key)
        elif isinstance(node, list):
            for child in node:
                walk(child, name)

    walk(crd)
    return found


def slot_name_schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["spec"]["properties"]["credentials"]["items"]["properties"]["name"])


def test_a_slot_name_and_a_credentials_key_have_one_pattern_in_the_schemas_the_operator_and_the_step_kit() -> None:
    crds = {r.kind: custom_resource_definition(r) for r in RESOURCES}
    assert credential_key_patterns(crds["Workflow"]) == {IDENTIFIER_PATTERN}
    for kind in ("StepType", "ClusterStepType"):
        assert slot_name_schema(crds[kind])["pattern"] == IDENTIFIER_PATTERN == SLOT_PATTERN
    assert f"^{CREDENTIAL_SLOT_PATTERN}$" == IDENTIFIER_PATTERN


def test_a_slot_no_step_could_bind_is_refused_by_the_operator_naming_the_field_and_the_fix() -> None:
    spec: dict[str, Any] = {"image": "registry.example.com/deploy:1",
                            "credentials": [{"name": "deploy-api", "keys": ["t"]}]}
    body = {"kind": "StepType", "metadata": {"name": "deploy"}, "spec": spec}
    problems = check_step_type(body, StepImagePolicy(("registry.example.com/",), require_digest=False))
    assert isinstance(problems, list) and len(problems) == 1
    assert problems[0].startswith("spec.credentials.0.name: ")
    assert "'deploy-api' is not a slot name" in problems[0] and "e.g. deploy_api" in problems[0]
    accepted = {**spec, "credentials": [{"name": "deploy_api", "keys": ["t"]}]}
    assert StepTypeSpec.model_validate(accepted).credentials[0].name == "deploy_api"
