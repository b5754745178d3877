"""The step kit as its own distribution (`towline-step`, stepkit/pyproject.toml), as a step author uses it:
built as `make release` builds it, installed alone into an empty virtual environment (its dependencies from the
package index, at the images' pins), where README's SDK step runs as the step container runs it. Nothing of the
operator or the connectors comes with it.

Needs the package index (or pip's cache) for pydantic and PyYAML, as `make install` does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import venv
from pathlib import Path

import pytest

from towline_dev import REPO_ROOT
from towline_dev.packaging import STEP_KIT, build_python

SECTION = (REPO_ROOT / "README.md").read_text().split("## Write your own step", 1)[1].split("\n## ", 1)[0]
ALLOWED = {"towline-step", "pydantic", "pydantic-core", "annotated-types", "typing-extensions", "typing-inspection",
           "pyyaml", "pip", "setuptools"}
"""What the environment may hold: the step kit, its two dependencies with theirs, and what `python -m venv` puts
there (pip, and on Python 3.11 setuptools)."""


def _snippet(language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", SECTION, re.S)
    assert found is not None, f"no {language} block in README's Write your own step"
    return textwrap.dedent(found.group(1))


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # A clean environment: nothing of this checkout's virtual environment or PYTHONPATH leaks into the step's.
    base = {key: value for key, value in os.environ.items()
            if key in {"PATH", "HOME", "LANG", "PIP_CACHE_DIR", "PIP_INDEX_URL", "PIP_CERT"}
            or key.lower().endswith("_proxy")}
    return subprocess.run(argv, cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def step_kit_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty virtual environment with the release-built `towline-step` wheel installed, and nothing else."""
    work = tmp_path_factory.mktemp("step-kit")
    built = build_python(REPO_ROOT, "0.1.0", work / "dist", STEP_KIT)
    (wheel,) = [path for path in built if path.suffix == ".whl"]
    assert wheel.name == "towline_step-0.1.0-py3-none-any.whl"
    environment = work / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(environment)
    python = environment / "bin" / "python"
    installed = _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                      "--only-binary=:all:", str(wheel)], cwd=work,
                     env={"PIP_CONSTRAINT": str(REPO_ROOT / "images" / "constraints.txt")})
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python


def test_the_step_kit_installs_alone_with_only_its_two_dependencies(step_kit_env: Path) -> None:
    listed = _run([str(step_kit_env), "-m", "pip", "list", "--format", "json"], cwd=step_kit_env.parent)
    names = {entry["name"].lower().replace("_", "-") for entry in json.loads(listed.stdout)}
    assert names == ALLOWED, f"besides the step kit and its dependencies: {sorted(names - ALLOWED)}"
    for module in ("towline", "towline_connectors", "towline_dev"):
        found = _run([str(step_kit_env), "-c", f"import {module}"], cwd=step_kit_env.parent)
        assert found.returncode != 0 and "ModuleNotFoundError" in found.stderr, module


def test_readmes_step_runs_with_the_installed_step_kit_as_its_container_runs_it(
    step_kit_env: Path, tmp_path: Path,
) -> None:
    (tmp_path / "greeter.py").write_text(_snippet("python"))
    (tmp_path / "inputs.json").write_text(json.dumps({"name": "Ada"}))
    result = tmp_path / "result.json"
    ran = _run([str(step_kit_env), "-m", "towline_step", "greeter:greet"], cwd=tmp_path,
               env={"TOWLINE_INPUTS_PATH": str(tmp_path / "inputs.json"), "TOWLINE_RESULT_PATH": str(result),
                    "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    document = json.loads(result.read_text())
    assert document["ok"] is True and document["output"] == {"greeting": "Hello, Ada"}, document

    # The author's tools come with it: the harness, and the StepType manifest as YAML.
    harness = _run([str(step_kit_env), "-m", "towline_step.harness", "greeter:greet", "--with", '{"name": " "}'],
                   cwd=tmp_path)
    assert harness.returncode != 0 and json.loads(harness.stdout)["result"]["errorClass"] == "permanent"
    manifest = _run([str(step_kit_env), "-m", "towline_step.manifest", "greeter:greet"], cwd=tmp_path)
    assert manifest.returncode == 0, manifest.stderr
    assert "kind: StepType" in manifest.stdout and "image: registry.example.com/steps/greeter:1.0" in manifest.stdout
