"""The editor's edits of a Workflow's text (static/editoryaml.js, run by Node.js) on every example: an edit of one
step changes that step's text and no byte outside it, and the result parses to exactly the edited Workflow."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from towline_dev import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))
SCRIPT = Path(__file__).with_name("editor_splices.mjs")


@pytest.fixture(scope="module")
def edits() -> list[dict[str, Any]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the editor's JavaScript is checked where it is")
    ran = subprocess.run([node, str(SCRIPT), *map(str, EXAMPLES)], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in ran.stdout.splitlines()]


def expected(edit: dict[str, Any]) -> Any:
    workflow = copy.deepcopy(edit["before"])
    *parents, last = edit["path"]
    node = workflow
    for key in parents:
        node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
    if edit["op"] == "delete":
        del node[last]
    else:
        node[last] = edit["value"]
    return workflow


def test_every_example_and_every_kind_of_edit_is_checked(edits: list[dict[str, Any]]) -> None:
    assert {e["file"] for e in edits} == {str(p) for p in EXAMPLES}
    assert {e["op"] for e in edits} == {"when", "delete", "label"}


def test_an_edit_parses_to_the_edited_workflow(edits: list[dict[str, Any]]) -> None:
    for edit in edits:
        assert edit["after"] == expected(edit), (edit["file"], edit["op"], edit["path"])


def test_an_edit_of_a_step_changes_no_byte_outside_that_step(edits: list[dict[str, Any]]) -> None:
    for edit in (e for e in edits if e["op"] != "label"):
        assert edit["keptOutside"], (edit["file"], edit["op"], edit["index"], edit["kept"])


def test_a_new_label_changes_nothing_in_spec(edits: list[dict[str, Any]]) -> None:
    """The label goes into metadata, in place: from `spec:` to the end, every byte is kept."""
    for edit in (e for e in edits if e["op"] == "label"):
        assert edit["keptOutside"] and edit["kept"][1] < edit["length"], edit["file"]
