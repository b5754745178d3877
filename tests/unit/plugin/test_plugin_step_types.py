"""Step types offline: `towline connectors -f` lists them beside the built-ins; `validate` checks `with` by them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from towline.cli import main as towline_main
from towline.plugin.cli import main as plugin_main
from towline.plugin.offline import validate_files
from towline_dev import REPO_ROOT

PROBE = REPO_ROOT / "examples" / "step-types" / "tcp-probe-go" / "steptype.yaml"
GREETER = REPO_ROOT / "examples" / "step-types" / "greeter-python" / "steptype.yaml"
WORKFLOW = """\
apiVersion: towline.dev/v1alpha1
kind: Workflow
metadata: {name: typed, namespace: team}
spec:
  steps:
    - {id: probe, action: steptype/tcp-probe, with: {message: hi, fail: sometimes}}
    - {id: greet, action: steptype/greeter, needs: [probe], with: {name: "${{ steps.probe.output.message }}"}}
"""


def test_the_catalog_lists_step_types_from_files_beside_the_built_ins(capsys: pytest.CaptureFixture[str]) -> None:
    assert towline_main(["connectors", "-f", str(PROBE), "-f", str(GREETER)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("ACTION") and "http.request" in table
    probe_row = next(line for line in table.splitlines() if line.startswith("steptype/tcp-probe"))
    assert "api?" in probe_row and "egress ports 443,8080" in probe_row
    assert "localhost/towline-steps/tcp-probe" in probe_row


def test_the_json_catalog_holds_each_types_schemas_slots_and_egress(capsys: pytest.CaptureFixture[str]) -> None:
    assert towline_main(["connectors", "--json", "-f", str(PROBE)]) == 0
    actions = json.loads(capsys.readouterr().out)["actions"]
    probe = actions["steptype/tcp-probe"]
    assert probe["input"]["properties"]["fail"]["enum"][0] == "transient"
    assert probe["credentials"] == [{"slot": "api", "keys": ["token"], "optional": True,
                                     "description": "A token the step proves it received, without revealing it."}]
    assert probe["egress"] == {"ports": [443, 8080], "hosts": "the step's allowHosts"}
    assert "http.request" in actions


def test_a_broken_type_file_is_named_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: towline.dev/v1alpha1\nkind: StepType\nmetadata: {name: x}\n"
                      "spec: {image: localhost/x:1, inputs: {type: array}}\n")
    assert towline_main(["connectors", "-f", str(broken)]) == 1
    assert "StepType x: spec.inputs: must describe an object" in capsys.readouterr().err


def test_validate_checks_with_against_the_types_in_the_files(tmp_path: Path) -> None:
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(WORKFLOW)
    lines, problems = validate_files([str(PROBE), str(GREETER), str(workflow)])
    assert problems == 1
    assert f"{PROBE}: StepType tcp-probe: valid" in lines
    [problem] = [line for line in lines if "typed:" in line]
    assert problem.startswith(f"{workflow}: typed: spec.steps[0].with.fail: 'sometimes' is not one of")


def test_validate_without_the_types_says_they_are_not_registered(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(WORKFLOW)
    assert plugin_main(["validate", str(workflow)]) == 1
    out = capsys.readouterr().out
    assert "spec.steps[0].action: unknown action 'steptype/tcp-probe'" in out or "is not registered" in out, out


def test_a_type_in_another_namespace_does_not_count(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(PROBE.read_text().replace("name: tcp-probe\n", "name: tcp-probe\n  namespace: other\n", 1))
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text(WORKFLOW.replace("fail: sometimes", "fail: transient"))
    lines, problems = validate_files([str(elsewhere), str(GREETER), str(workflow)])
    assert problems == 1 and any("steptype/tcp-probe" in line for line in lines if "typed:" in line), lines
