"""The docs' ```yaml blocks read by their rules (towline_dev.docyaml), as tests/integration/test_docs_yaml.py
applies them: whole objects as written, marked fragments put into a base object, nothing skipped unsaid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from towline_dev import REPO_ROOT
from towline_dev.docyaml import BASES, DocYamlError, doc_yaml, documented_yaml, read_yaml, wrap_fragment

WHOLE = """\
# Notes

```yaml
apiVersion: towline.dev/v1alpha1
kind: Workflow
metadata: {name: a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b}
```
"""


def _read(tmp_path: Path, markdown: str) -> list:  # type: ignore[type-arg]
    (tmp_path / "doc.md").write_text(markdown)
    return doc_yaml(tmp_path / "doc.md", tmp_path)


def test_a_block_of_whole_objects_is_applied_as_written(tmp_path: Path) -> None:
    (block,) = _read(tmp_path, WHOLE)
    assert block.source == "doc.md:3"
    assert block.text == "\n".join(WHOLE.splitlines()[3:10]) + "\n"
    assert [d["kind"] for d in block.documents] == ["Workflow", "ConfigMap"]
    assert block.not_applied is None and block.fragment is None


def test_an_unmarked_fragment_is_an_error_naming_the_line_and_the_markers(tmp_path: Path) -> None:
    with pytest.raises(DocYamlError) as raised:
        _read(tmp_path, "text\n\n```yaml\nsteps: []\n```\n")
    assert "doc.md:3" in str(raised.value)
    assert "<!-- fragment: KIND at PATH -->" in str(raised.value)
    assert "<!-- not-applied: WHY -->" in str(raised.value)


def test_a_fragment_is_merged_into_its_kinds_base_object(tmp_path: Path) -> None:
    (block,) = _read(tmp_path, "<!-- fragment: Workflow -->\n```yaml\nspec:\n  suspend: true\n```\n")
    (wrapped,) = block.documents
    assert wrapped["spec"]["suspend"] is True
    assert wrapped["spec"]["steps"] == BASES["Workflow"]["spec"]["steps"]  # merged, not replaced
    assert json.loads(block.text) == wrapped
    assert block.fragment == "Workflow"


def test_a_list_fragment_replaces_the_list_at_its_path(tmp_path: Path) -> None:
    (block,) = _read(tmp_path, "<!-- fragment: Workflow at spec.triggers -->\n```yaml\n- name: push\n```\n")
    assert block.documents[0]["spec"]["triggers"] == [{"name": "push"}]
    wrapped = wrap_fragment("doc.md:2", "Workflow", "spec.steps[0]", {"with": {"method": "POST"}})
    assert wrapped["spec"]["steps"][0]["with"] == {"url": "https://api.example.com/", "method": "POST"}


def test_an_unquoted_on_is_read_as_kubectl_reads_it_the_boolean_true() -> None:
    # YAML 1.1, which kubectl's reader follows: the trap a field named `on` fell into.
    assert read_yaml("on: [opened]\n'on': [decided]\nwhen: 2026-01-01\n") == [
        {True: ["opened"], "on": ["decided"], "when": "2026-01-01"}]


def test_a_not_applied_block_says_why(tmp_path: Path) -> None:
    (block,) = _read(tmp_path, "<!-- not-applied: chart values -->\n```yaml\nstepPods: {}\n```\n")
    assert block.not_applied == "chart values"


@pytest.mark.parametrize(("marker", "wanted"), [
    ("<!-- fragment: Secret at data -->", "no base object for kind 'Secret'"),
    ("<!-- fragment: Workflow at spec..steps -->", "is not a path"),
    ("<!-- fragment: Workflow at spec.steps[3] -->", "the base Workflow has nothing at"),
    ("<!-- fragments: Workflow -->", "does not read"),
])
def test_a_bad_marker_is_an_error_saying_what_is_wrong(tmp_path: Path, marker: str, wanted: str) -> None:
    with pytest.raises(DocYamlError, match=wanted):
        _read(tmp_path, f"{marker}\n```yaml\nkey: {{a: 1}}\n```\n")


def test_a_marker_above_another_kind_of_block_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DocYamlError, match="markers are for ```yaml blocks only"):
        _read(tmp_path, "<!-- not-applied: output -->\n```console\n$ true\n```\n")


def test_every_yaml_block_of_the_docs_follows_the_rules() -> None:
    blocks = documented_yaml(REPO_ROOT)
    assert any(block.fragment for block in blocks) and any(block.not_applied for block in blocks)
    for block in blocks:
        if block.not_applied is None:
            assert all(d.get("apiVersion") and d.get("kind") for d in block.documents), block.source
