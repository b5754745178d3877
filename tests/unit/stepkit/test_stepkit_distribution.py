"""The step kit as its own distribution (`towline-step`, stepkit/pyproject.toml), as a step author uses it:
built as `make release` builds it and installed into empty virtual environments. Without its `sdk` extra it is
the standard library alone: a step written against `towline_step.protocol` runs, and the SDK is an ImportError
naming the extra. With the extra (its dependencies from the package index, at the images' pins), README's SDK
step runs as the step container runs it. The operator's wheel depends on it instead of carrying a copy, so the
two install together. Nothing of the operator or the connectors comes with it.

Needs the package index (or pip's cache) for pydantic and PyYAML, as `make install` does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from towline_dev import REPO_ROOT
from towline_dev.distcache import copy_python_dists, python_dists
from towline_dev.packaging import STEP_KIT
from towline_step.protocol import read_result_message

SECTION = (REPO_ROOT / "README.md").read_text().split("## Write your own step", 1)[1].split("\n## ", 1)[0]
VENV_OWN = {"pip", "setuptools"}
"""What `python -m venv` puts in an environment (pip, and on Python 3.11 setuptools)."""
SDK_EXTRA = {"pydantic", "pydantic-core", "annotated-types", "typing-extensions", "typing-inspection", "pyyaml"}
"""The `sdk` extra's two dependencies with theirs."""

PROTOCOL_ONLY_STEP = '''\
import json, os, sys
from pathlib import Path

from towline_step import protocol

inputs = json.loads(Path(os.environ[protocol.INPUTS_PATH_ENV]).read_text())
result = protocol.Result(ok=True, output={"greeting": f"Hello, {inputs['name']}"})
Path(os.environ[protocol.RESULT_PATH_ENV]).write_text(json.dumps(result.wire_form(None)))
loaded = sorted(name for name in sys.modules if name.partition(".")[0] in {"pydantic", "pydantic_core", "yaml"})
print(json.dumps(loaded))
sys.exit(result.exit_code)
'''
"""A step written against the protocol alone: reads its inputs, writes the result document, exits with its code."""


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


def _installed(python: Path) -> set[str]:
    listed = _run([str(python), "-m", "pip", "list", "--format", "json"], cwd=python.parent)
    return {entry["name"].lower().replace("_", "-") for entry in json.loads(listed.stdout)}


def _pip_install(python: Path, *requirements: str, index: bool = True) -> None:
    installed = _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                      "--only-binary=:all:", *([] if index else ["--no-index"]), *requirements], cwd=python.parent,
                     env={"PIP_CONSTRAINT": str(REPO_ROOT / "images" / "constraints.txt")})
    assert installed.returncode == 0, installed.stdout + installed.stderr


def _empty_venv(where: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    return where / "bin" / "python"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The step kit's wheel, as `make release` builds it (once per content: `towline_dev.distcache`); the
    operator's wheel is taken by the test that needs it."""
    dist = tmp_path_factory.mktemp("dist")
    (wheel,) = [path for path in copy_python_dists("0.1.0", dist, STEP_KIT) if path.suffix == ".whl"]
    assert wheel.name == "towline_step-0.1.0-py3-none-any.whl"
    return {"dist": dist, "towline-step": wheel}


@pytest.fixture(scope="module")
def bare_env(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty virtual environment with the `towline-step` wheel alone, without its extra: no package index."""
    python = _empty_venv(tmp_path_factory.mktemp("bare") / "venv")
    _pip_install(python, str(wheels["towline-step"]), index=False)
    return python


@pytest.fixture(scope="module")
def sdk_env(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty virtual environment with the wheel installed by README's own command: with the `sdk` extra."""
    command = next(line for line in _snippet("console").splitlines() if " install " in line)
    (requirement,) = [word for word in shlex.split(command) if "towline_step-" in word]
    assert requirement.endswith(".whl[sdk]"), f"README installs the step kit without its sdk extra: {command}"
    python = _empty_venv(tmp_path_factory.mktemp("sdk") / "venv")
    _pip_install(python, requirement.replace("dist/" + wheels["towline-step"].name, str(wheels["towline-step"])))
    return python


def test_the_step_kit_without_its_extra_installs_alone_and_depends_on_nothing(bare_env: Path) -> None:
    assert _installed(bare_env) == {"towline-step"} | VENV_OWN
    for module in ("towline", "towline_connectors", "towline_dev", "pydantic", "yaml"):
        found = _run([str(bare_env), "-c", f"import {module}"], cwd=bare_env.parent)
        assert found.returncode != 0 and "ModuleNotFoundError" in found.stderr, module


def test_a_protocol_only_step_runs_on_the_standard_library_alone(bare_env: Path, tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROTOCOL_ONLY_STEP)
    (tmp_path / "inputs.json").write_text(json.dumps({"name": "Ada"}))
    result = tmp_path / "result.json"
    ran = _run([str(bare_env), "probe.py"], cwd=tmp_path,
               env={"TOWLINE_INPUTS_PATH": str(tmp_path / "inputs.json"), "TOWLINE_RESULT_PATH": str(result)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert json.loads(ran.stdout) == [], "the protocol loaded the SDK's dependencies"
    # What it wrote is a result document the operator's strict reader accepts as it is.
    document = read_result_message(result.read_text())
    assert document is not None and document.ok and document.output == {"greeting": "Hello, Ada"}, document


@pytest.mark.parametrize("use", [
    "from towline_step import step",
    "import towline_step; towline_step.Step",
    "import towline_step.definition",
    "import towline_step.manifest",
])
def test_the_sdk_without_its_extra_is_an_import_error_naming_it(bare_env: Path, use: str) -> None:
    ran = _run([str(bare_env), "-c", use], cwd=bare_env.parent)
    assert ran.returncode != 0
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError:") and "pip install 'towline-step[sdk]'" in last, ran.stderr


def test_an_sdk_step_run_without_the_extra_leaves_a_result_document_naming_it(bare_env: Path, tmp_path: Path) -> None:
    (tmp_path / "greeter.py").write_text(_snippet("python"))
    result = tmp_path / "result.json"
    ran = _run([str(bare_env), "-m", "towline_step", "greeter:greet"], cwd=tmp_path,
               env={"TOWLINE_RESULT_PATH": str(result), "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 1, ran.stdout + ran.stderr
    document = read_result_message(result.read_text())
    assert document is not None and not document.ok and "towline-step[sdk]" in (document.message or ""), document


def test_with_the_extra_the_step_kit_holds_only_its_two_dependencies(sdk_env: Path) -> None:
    assert _installed(sdk_env) == {"towline-step"} | SDK_EXTRA | VENV_OWN
    for module in ("towline", "towline_connectors", "towline_dev"):
        found = _run([str(sdk_env), "-c", f"import {module}"], cwd=sdk_env.parent)
        assert found.returncode != 0 and "ModuleNotFoundError" in found.stderr, module


def test_readmes_step_runs_with_the_sdk_extra_as_its_container_runs_it(sdk_env: Path, tmp_path: Path) -> None:
    (tmp_path / "greeter.py").write_text(_snippet("python"))
    (tmp_path / "inputs.json").write_text(json.dumps({"name": "Ada"}))
    result = tmp_path / "result.json"
    ran = _run([str(sdk_env), "-m", "towline_step", "greeter:greet"], cwd=tmp_path,
               env={"TOWLINE_INPUTS_PATH": str(tmp_path / "inputs.json"), "TOWLINE_RESULT_PATH": str(result),
                    "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    document = json.loads(result.read_text())
    assert document["ok"] is True and document["output"] == {"greeting": "Hello, Ada"}, document

    # The author's tools come with it: the harness, and the StepType manifest as YAML.
    harness = _run([str(sdk_env), "-m", "towline_step.harness", "greeter:greet", "--with", '{"name": " "}'],
                   cwd=tmp_path)
    assert harness.returncode != 0 and json.loads(harness.stdout)["result"]["errorClass"] == "permanent"
    manifest = _run([str(sdk_env), "-m", "towline_step.manifest", "greeter:greet"], cwd=tmp_path)
    assert manifest.returncode == 0, manifest.stderr
    assert "kind: StepType" in manifest.stdout and "image: registry.example.com/steps/greeter:1.0" in manifest.stdout


def test_the_operators_wheel_and_the_step_kit_install_together(
    wheels: dict[str, Path], tmp_path: Path,
) -> None:
    (operator,) = [path for path in python_dists("0.1.0") if path.suffix == ".whl"]
    with zipfile.ZipFile(operator) as archive:
        carried = [name for name in archive.namelist() if name.startswith("towline_step/")]
        metadata = archive.read("towline-0.1.0.dist-info/METADATA").decode()
    assert carried == [], "the operator's wheel carries the step kit's package"
    assert "Requires-Dist: towline-step==0.1.0" in metadata.splitlines()

    # Both in one environment (the operator's other dependencies left out: only the two wheels' files meet).
    python = _empty_venv(tmp_path / "venv")
    _pip_install(python, "--no-deps", str(operator), str(wheels["towline-step"]), index=False)
    owners = _run([str(python), "-c", textwrap.dedent("""\
        import json
        from importlib.metadata import files
        print(json.dumps({name: sorted(str(f) for f in files(name) if f.parts[0] == "towline_step")
                          for name in ("towline", "towline-step")}))""")], cwd=tmp_path)
    owned = json.loads(owners.stdout)
    assert owned["towline"] == [] and "towline_step/protocol.py" in owned["towline-step"], owned
    # pip finds the operator's towline-step requirement met by the step kit's wheel (the rest are left out here).
    checked = _run([str(python), "-m", "pip", "check"], cwd=tmp_path)
    assert "requires kopf" in checked.stdout and "towline-step" not in checked.stdout, checked.stdout
    # Removing the operator leaves the step kit whole (two owners of one file would take it away).
    removed = _run([str(python), "-m", "pip", "uninstall", "--yes", "towline"], cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    still = _run([str(python), "-c", "import towline_step.protocol"], cwd=tmp_path)
    assert still.returncode == 0, still.stderr
