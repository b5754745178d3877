"""README "Write your own step": its Python step runs in the harness, and its Workflow validates against the
manifest generated from that step, exactly as a newcomer following the section would do it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from towline.plugin.offline import validate_files
from towline_dev import REPO_ROOT

SECTION = (REPO_ROOT / "README.md").read_text().split("## Write your own step", 1)[1].split("\n## ", 1)[0]


def snippet(language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", SECTION, re.S)
    assert found is not None, f"no {language} block in the section"
    return textwrap.dedent(found.group(1))


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)


def test_the_sections_step_runs_and_its_workflow_is_valid(tmp_path: Path) -> None:
    (tmp_path / "greeter.py").write_text(snippet("python"))
    ran = run(tmp_path, "towline_step.harness", "greeter:greet", "--with", '{"name": "Ada"}')
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert json.loads(ran.stdout)["result"]["output"] == {"greeting": "Hello, Ada"}
    blank = run(tmp_path, "towline_step.harness", "greeter:greet", "--with", '{"name": " "}')
    assert blank.returncode != 0 and json.loads(blank.stdout)["result"]["errorClass"] == "permanent"
    manifest = run(tmp_path, "towline_step.manifest", "greeter:greet")
    assert manifest.returncode == 0, manifest.stderr
    (tmp_path / "steptype.yaml").write_text(manifest.stdout)
    workflow = ("apiVersion: towline.dev/v1alpha1\nkind: Workflow\nmetadata: {name: hello}\nspec:\n"
                "  params: [{name: who, type: string, default: Ada}]\n" + textwrap.indent(snippet("yaml"), "  "))
    (tmp_path / "workflow.yaml").write_text(workflow)
    lines, problems = validate_files([str(tmp_path / "steptype.yaml"), str(tmp_path / "workflow.yaml")])
    assert problems == 0, lines
