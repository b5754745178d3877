"""The CRD generator: structural schemas, names, columns, determinism, the staleness check."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field
from tests.yamlread import generated_crds

from towline.api import crdgen
from towline.api.common import TowlineModel
from towline.api.structural import SchemaError, structural_schema
from towline_dev import generated

REPO = Path(__file__).resolve().parents[3]
# Short names and plurals of Argo Workflows and Tekton (Pipelines, Triggers): ours must not collide.
FOREIGN_SHORT_NAMES = {"wf", "wfs", "cwf", "cronwf", "wftmpl", "cwftmpl", "clusterwftmpl", "wfeb", "wfts", "wftr",
                       "wfat", "pr", "prs", "tr", "trs", "p", "t", "tb", "tt", "el", "ctb", "ci", "crun"}
CRDS = generated_crds()


def schema_of(plural: str) -> dict[str, Any]:
    crd = CRDS[f"{plural}.towline.dev.yaml"]
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}.*")


@pytest.mark.parametrize("plural", ["workflows", "workflowruns", "approvals"])
def test_every_schema_node_is_structural(plural: str) -> None:
    for path, node in nodes(schema_of(plural)):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not {"$ref", "$defs", "anyOf", "allOf", "oneOf", "title", "default", "const"} & set(node), path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert not isinstance(node.get("additionalProperties"), bool), path


@pytest.mark.parametrize("name", sorted(CRDS))
def test_every_field_item_and_map_value_has_a_description(name: str) -> None:
    """What `kubectl explain` shows: spec and status, nested objects, array items and map values alike."""
    schema = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    undescribed = [path or "(the resource)" for path, node in nodes(schema)
                   if not node.get("description", "").strip() and not path.startswith(".metadata")]
    assert undescribed == [], f"{name}: no description at {', '.join(undescribed)}"


def test_metadata_holds_only_the_name_limit_as_the_api_server_requires() -> None:
    """The API server refuses a CRD whose metadata schema says more (a description included)."""
    for crd in CRDS.values():
        metadata = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"]
        assert metadata == {"type": "object", "properties": {"name": {"type": "string", "maxLength": 63}}}


def test_the_description_check_sees_every_node() -> None:
    """The walk above reaches list items, map values and status, so it cannot pass by looking at too little."""
    runs = {path for path, _ in nodes(schema_of("workflowruns"))}
    assert {".spec.retryOf.reuse[]", ".status.steps[].history[].image", ".status.steps[].credentialsUsed[]",
            ".status.workflowSpec"} <= runs
    workflows = {path for path, _ in nodes(schema_of("workflows"))}
    assert {".spec.steps[].credentials.*", ".spec.triggers[].webhook.data.*", ".spec.finally[].with"} <= workflows
    assert len(runs) > 80 and len(workflows) > 200


def test_a_runs_workflow_copy_is_opaque_to_the_api_server() -> None:
    """status.workflowSpec is a copy of a spec the Workflow's schema admitted, written by the operator alone and
    parsed whole by it on every read: validating and pruning it again on each status write cost the API server
    about a fifth of its CPU in a 50-step fan-out (docs/benchmarks.md)."""
    copy = schema_of("workflowruns")["properties"]["status"]["properties"]["workflowSpec"]
    assert copy["type"] == "object" and copy["x-kubernetes-preserve-unknown-fields"] is True
    assert "properties" not in copy and copy["description"].strip()


def test_a_description_states_the_default() -> None:
    step = schema_of("workflows")["properties"]["spec"]["properties"]["steps"]["items"]["properties"]
    assert step["approval"]["properties"]["expiresAfter"]["description"].endswith('Defaults to "24h".')
    assert "Defaults to [transient, rate_limit, timeout]" in step["retry"]["properties"]["retryOn"]["description"]


def test_the_committed_crds_are_up_to_date() -> None:
    assert generated.stale_crds(REPO / "crds") == [], "run `make crds`"


def test_generation_is_deterministic() -> None:
    assert crdgen.generated_files() == crdgen.generated_files()
    assert all(text.endswith("\n") and text.startswith("# Generated") for text in crdgen.generated_files().values())


def test_check_fails_on_stale_missing_and_extra_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert generated.main(["crds", "--out", str(tmp_path)]) == 0
    assert generated.main(["crds", "--check", str(tmp_path)]) == 0
    (tmp_path / "workflows.towline.dev.yaml").write_text("stale\n")
    (tmp_path / "approvals.towline.dev.yaml").unlink()
    (tmp_path / "pipelines.towline.dev.yaml").write_text("old\n")
    assert generated.main(["crds", "--check", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert "workflows.towline.dev.yaml, approvals.towline.dev.yaml, pipelines.towline.dev.yaml" in error
    assert "run `make crds`" in error
    generated.main(["crds", "--out", str(tmp_path)])
    assert not (tmp_path / "pipelines.towline.dev.yaml").exists()
    assert generated.main(["crds", "--check", str(tmp_path)]) == 0


@pytest.mark.parametrize(("plural", "kind", "short"), [
    ("workflows", "Workflow", "tlwf"), ("workflowruns", "WorkflowRun", "tlrun"), ("approvals", "Approval", "tlappr"),
])
def test_names_category_scope_and_status_subresource(plural: str, kind: str, short: str) -> None:
    spec = CRDS[f"{plural}.towline.dev.yaml"]["spec"]
    assert spec["group"] == "towline.dev" and spec["scope"] == "Namespaced"
    assert spec["names"] == {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                             "shortNames": [short], "categories": ["towline"]}
    assert not set(spec["names"]["shortNames"]) & FOREIGN_SHORT_NAMES
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(("plural", "default", "wide"), [
    ("workflows", ["Ready", "Reason", "Last Run", "Next Schedule", "Age"], ["Last Phase", "Suspended", "Message"]),
    ("workflowruns", ["Workflow", "Phase", "Step", "Started", "Duration", "Age"],
     ["Trigger", "Requested By", "Finished", "Message"]),
    ("approvals", ["Run", "Step", "Approvers", "Decision", "Decided By", "Expires", "Age"],
     ["Phase", "Workflow", "Requested By", "Message"]),
])
def test_printer_columns(plural: str, default: list[str], wide: list[str]) -> None:
    columns = CRDS[f"{plural}.towline.dev.yaml"]["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == default
    assert [c["name"] for c in columns if c.get("priority") == 1] == wide
    # kubectl shows a future `date` as "<invalid>": times that lie ahead are printed as text.
    future = {c["name"]: c["type"] for c in columns if c["name"] in {"Next Schedule", "Expires"}}
    assert set(future.values()) <= {"string"}


def test_duration_and_approvers_columns_read_the_one_line_fields_the_operator_writes() -> None:
    """A JSONPath column can show neither elapsed time nor a whole list: both are status strings."""
    def column(plural: str, name: str) -> dict[str, object]:
        columns = CRDS[f"{plural}.towline.dev.yaml"]["spec"]["versions"][0]["additionalPrinterColumns"]
        return next(c for c in columns if c["name"] == name)

    assert column("workflowruns", "Duration") == {
        "name": "Duration", "type": "string", "jsonPath": ".status.duration",
        "description": "How long a finished run took",
    }
    assert column("approvals", "Approvers")["jsonPath"] == ".status.approvers"
    assert column("approvals", "Message")["jsonPath"] == ".spec.message"
    status = schema_of("workflowruns")["properties"]["status"]["properties"]
    assert status["duration"]["type"] == "string"
    assert status["observedGeneration"]["minimum"] == 0
    assert schema_of("approvals")["properties"]["status"]["properties"]["approvers"]["type"] == "string"


def test_step_lists_are_maps_keyed_by_id_so_the_api_server_rejects_duplicates() -> None:
    spec = schema_of("workflows")["properties"]["spec"]["properties"]
    for name in ("steps", "finally", "compensations"):
        assert spec[name]["x-kubernetes-list-type"] == "map"
        assert spec[name]["x-kubernetes-list-map-keys"] == ["id"]
    assert spec["params"]["x-kubernetes-list-map-keys"] == ["name"]
    status = schema_of("workflows")["properties"]["status"]["properties"]
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_everything_a_cel_rule_iterates_over_is_bounded() -> None:
    for plural in ("workflows", "workflowruns", "approvals"):
        for path, node in nodes(schema_of(plural)["properties"]["spec"], ".spec"):
            if node.get("type") == "array":
                assert "maxItems" in node, f"{plural}{path}"
            if node.get("type") == "string" and "enum" not in node and "format" not in node:
                assert "maxLength" in node, f"{plural}{path}"


def test_status_carries_no_rules() -> None:
    for plural in ("workflows", "workflowruns", "approvals"):
        status = schema_of(plural)["properties"]["status"]
        assert all("x-kubernetes-validations" not in node for _, node in nodes(status)), plural


def test_defaults_are_documented_not_applied() -> None:
    retry = schema_of("workflows")["properties"]["spec"]["properties"]["steps"]["items"]["properties"]["retry"]
    assert retry["properties"]["limit"]["description"] == "Extra attempts after the first. Defaults to 0."


def test_free_form_fields_keep_unknown_fields() -> None:
    step = schema_of("workflows")["properties"]["spec"]["properties"]["steps"]["items"]["properties"]
    assert step["with"] == {"description": step["with"]["description"], "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True}


class _Union(TowlineModel):
    value: int | str


class _Loose(TowlineModel):
    value: dict[str, object] = Field(default_factory=dict)


class _Resource(TowlineModel):
    spec: _Union


class _LooseResource(TowlineModel):
    spec: _Loose


def test_a_union_of_types_is_refused_with_the_field_named() -> None:
    with pytest.raises(SchemaError, match=r"_Resource\.spec\.value: a union of several types"):
        structural_schema(_Resource)


def test_a_free_form_object_without_preserve_unknown_fields_is_refused() -> None:
    with pytest.raises(SchemaError, match="would be pruned empty"):
        structural_schema(_LooseResource)


class _Nested(TowlineModel):
    """Described by its docstring."""

    inner: int = 0


class _UndescribedSpec(TowlineModel):
    """A spec whose fields lack descriptions."""

    described: str = Field(default="", description="Has one.")
    plain: str = ""
    nested: _Nested = Field(default_factory=_Nested, description="Has one, its field does not.")
    names: list[str] = Field(default_factory=list, description="Has one, its items do not.")


class _UndescribedStatus(TowlineModel):
    """Status too."""

    phase: str = ""


class _Undescribed(TowlineModel):
    """A resource with undescribed fields."""

    spec: _UndescribedSpec = Field(description="The spec.")
    status: _UndescribedStatus | None = Field(default=None, description="The status.")


def test_a_field_without_a_description_is_refused_naming_every_one() -> None:
    with pytest.raises(SchemaError) as refused:
        structural_schema(_Undescribed)
    message = str(refused.value)
    assert "_Undescribed: 4 field(s) without a description" in message
    for path in ("_Undescribed.spec.plain", "_Undescribed.spec.nested.inner", "_Undescribed.spec.names[]",
                 "_Undescribed.status.phase"):
        assert path in message
    assert "spec.described" not in message and "Field(description=" in message


def test_make_crds_refuses_an_undescribed_field_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(crdgen, "RESOURCES", (crdgen.Resource(_Undescribed, "undescribeds", (), ()),))
    assert generated.main(["crds", "--out", str(tmp_path / "out")]) == 1
    assert "cannot generate the CRDs: _Undescribed: 4 field(s)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
