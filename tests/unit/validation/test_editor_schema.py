"""The editor schema (schemas/workflow.schema.json): every example fits it, mistakes are refused by path.

Checked with the `jsonschema` library as draft-07, the draft the YAML language server implements.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from towline import cli
from towline.validation import editorschema
from towline.validation.catalog import connector_catalog
from towline_connectors.registry import ACTIONS
from towline_dev import generated

REPO = Path(__file__).resolve().parents[3]
SCHEMA_FILE = REPO / "schemas" / "workflow.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
VALIDATOR = Draft7Validator(SCHEMA)
WORKFLOW_FILES = sorted(
    path for path in (REPO / "examples").rglob("*.yaml")
    if any((document or {}).get("kind") == "Workflow" for document in yaml.safe_load_all(path.read_text()))
)

BASE: dict[str, Any] = {
    "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "renewals"},
    "spec": {
        "params": [{"name": "days", "type": "integer", "default": 7}],
        "steps": [
            {"id": "load", "action": "http.request", "credentials": {"crm": "crm-api"},
             "with": {"url": "https://crm.example.com/api?days=${{ params.days }}",
                      "auth": {"bearer": {"credential": "crm", "key": "token"}}}},
            {"id": "tell", "needs": ["load"], "action": "notify.slack", "with": {"text": "done"}},
        ],
        "finally": [{"id": "log", "action": "data.transform", "with": {"fields": {"n": "1"}}}],
    },
}


def errors(document: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((error.json_path, error.message) for error in VALIDATOR.iter_errors(document))


def edited(path: list[str | int], value: Any = None, *, rename: str | None = None) -> dict[str, Any]:
    """BASE with the value at `path` set, or its key renamed to `rename`."""
    document = copy.deepcopy(BASE)
    node: Any = document
    for part in path[:-1]:
        node = node[part]
    if rename is not None:
        node[rename] = node.pop(path[-1])
    else:
        node[path[-1]] = value
    return document


def test_the_committed_schema_is_what_the_models_generate() -> None:
    assert SCHEMA_FILE.read_text() == editorschema.render(editorschema.workflow_schema()), "run `make schemas`"


def test_the_check_fails_on_a_stale_or_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "workflow.schema.json"
    assert generated.main(["schema", "--check", str(target)]) == 1
    assert generated.main(["schema", "--out", str(target)]) == 0
    assert generated.main(["schema", "--check", str(target)]) == 0
    target.write_text(target.read_text().replace("http.request", "http.fetch"))
    assert generated.main(["schema", "--check", str(target)]) == 1
    assert "run `make schemas`" in capsys.readouterr().err


def test_it_is_a_valid_draft_07_schema() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    Draft7Validator.check_schema(SCHEMA)


def test_there_are_workflow_examples_in_subdirectories_too() -> None:
    names = {path.relative_to(REPO / "examples").as_posix() for path in WORKFLOW_FILES}
    assert {"hello-towline.yaml", "code-steps/python/workflow.yaml", "code-steps/wasm-go/workflow.yaml"} <= names
    assert len(names) >= 7


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.relative_to(REPO / "examples").as_posix())
def test_every_workflow_example_fits_the_schema(path: Path) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        assert errors(document) == []


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.relative_to(REPO / "examples").as_posix())
def test_every_workflow_example_names_the_schema_in_its_modeline(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first.startswith(prefix)
    # The language server resolves a relative path against the file's own directory.
    assert (path.parent / first.removeprefix(prefix)).resolve() == SCHEMA_FILE
    assert not os.path.isabs(first.removeprefix(prefix))


def test_the_base_document_fits() -> None:
    assert errors(BASE) == []


def test_a_misspelt_action_input_is_refused_naming_the_step_and_the_key() -> None:
    assert errors(edited(["spec", "steps", 0, "with", "url"], rename="urll")) == [
        ("$.spec.steps[0].with", "'url' is a required property"),
        ("$.spec.steps[0].with", "Additional properties are not allowed ('urll' was unexpected)"),
    ]


def test_a_misspelt_input_is_refused_even_when_its_value_is_a_binding() -> None:
    document = edited(["spec", "steps", 1, "with", "txet"], "${{ steps.load.output.status }}")
    assert ("$.spec.steps[1].with", "Additional properties are not allowed ('txet' was unexpected)") in errors(
        document)


def test_finally_and_compensation_steps_are_checked_against_their_action_too() -> None:
    document = edited(["spec", "finally", 0, "with", "feilds"], {"n": "1"})
    assert ("$.spec.finally[0].with", "Additional properties are not allowed ('feilds' was unexpected)") in errors(
        document)
    document = edited(["spec", "compensations"], [{"id": "undo", "action": "notify.slack", "with": {"txt": "x"}}])
    assert ("$.spec.compensations[0].with", "Additional properties are not allowed ('txt' was unexpected)") in errors(
        document)


def test_an_unknown_action_is_refused_at_the_action() -> None:
    [(where, message)] = errors(edited(["spec", "steps", 0, "action"], "http.requets"))
    assert where == "$.spec.steps[0].action" and "'http.requets' is not valid" in message


def test_a_misspelt_step_key_is_refused_naming_the_step() -> None:
    assert errors(edited(["spec", "steps", 1, "needs"], rename="needz")) == [
        ("$.spec.steps[1]", "Additional properties are not allowed ('needz' was unexpected)"),
    ]


def test_a_wrong_literal_value_is_refused_where_it_is() -> None:
    [(where, _)] = errors(edited(["spec", "steps", 0, "with", "maxRedirects"], 50))
    assert where == "$.spec.steps[0].with.maxRedirects"
    [(where, _)] = errors(edited(["spec", "steps", 0, "with", "responseFormat"], "xml"))
    assert where == "$.spec.steps[0].with.responseFormat"


def test_bindings_are_accepted_wherever_a_value_is_expected() -> None:
    document = edited(["spec", "steps", 0, "with", "timeoutSeconds"], "${{ params.days * 2 }}")
    document["spec"]["steps"][0]["with"]["acceptStatuses"] = [200, "${{ params.days }}"]
    document["spec"]["steps"][0]["with"]["auth"] = "${{ params.auth }}"
    assert errors(document) == []
    assert errors(edited(["spec", "steps", 0, "with", "timeoutSeconds"], "ten")) != []


def test_with_itself_must_be_a_mapping() -> None:
    found = errors(edited(["spec", "steps", 0, "with"], "${{ params.inputs }}"))
    assert found and {where for where, _ in found} == {"$.spec.steps[0].with"}


def test_a_step_types_inputs_are_free_form_and_its_name_must_have_the_kind() -> None:
    assert errors(edited(["spec", "steps", 0], {"id": "probe", "action": "steptype/tcp-probe",
                                                "with": {"anything": 1}})) == []
    assert errors(edited(["spec", "steps", 0], {"id": "probe", "action": "clustersteptype/deploy"})) == []
    assert errors(edited(["spec", "steps", 0, "action"], "steptypes/tcp-probe")) != []


def test_a_step_needs_exactly_one_kind() -> None:
    both = edited(["spec", "steps", 1, "wait"], {"duration": "5m"})
    assert [where for where, _ in errors(both)] == ["$.spec.steps[1]"]


def test_every_built_in_action_has_its_inputs_checked() -> None:
    conditioned = {rule["if"]["properties"]["action"]["const"] for rule in SCHEMA["definitions"]["Step"]["allOf"]}
    assert conditioned == set(ACTIONS) == set(connector_catalog().input_schemas())
    assert all(SCHEMA["definitions"][f"with.{name}"]["additionalProperties"] is False for name in ACTIONS)


def test_the_status_is_not_part_of_what_an_author_writes() -> None:
    assert errors({**BASE, "status": {}}) == [("$", "Additional properties are not allowed ('status' was unexpected)")]
    assert not {"WorkflowStatus", "Condition"} & set(SCHEMA["definitions"])


TCP_PROBE = REPO / "examples" / "step-types" / "tcp-probe-go" / "steptype.yaml"


def test_a_step_types_inputs_are_checked_when_its_manifest_is_given(tmp_path: Path) -> None:
    target = tmp_path / "workflow.schema.json"
    assert cli.main(["editor-schema", "--out", str(target), "--step-type", str(TCP_PROBE)]) == 0
    validator = Draft7Validator(json.loads(target.read_text()))
    step = {"id": "probe", "action": "steptype/tcp-probe", "with": {"connect": "${{ params.target }}"}}
    assert list(validator.iter_errors(edited(["spec", "steps", 0], step))) == []
    step["with"] = {"conect": "db.example.com:5432"}
    assert [(e.json_path, e.message) for e in validator.iter_errors(edited(["spec", "steps", 0], step))] == [
        ("$.spec.steps[0].with", "Additional properties are not allowed ('conect' was unexpected)"),
    ]
    other = {"id": "other", "action": "clustersteptype/tcp-probe", "with": {"conect": 1}}
    assert list(validator.iter_errors(edited(["spec", "steps", 0], other))) == []  # another type: free-form


def test_a_missing_step_type_manifest_is_named_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "workflow.schema.json"
    assert cli.main(["editor-schema", "--out", str(target), "--step-type", str(tmp_path / "absent.yaml")]) == 2
    error = capsys.readouterr().err
    assert "--step-type" in error and "absent.yaml" in error and "StepType or ClusterStepType manifest" in error
    assert not target.exists()
