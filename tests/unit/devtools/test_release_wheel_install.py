"""README's "Install the `kubectl towline` plugin", run as written against the wheels `make release` builds (built
once per content of the sources, `towline_dev.distcache`): the plugin's wheel and the step kit's (`towline-step`,
which the plugin's depends on at the same version) in one dist directory, installed into a fresh virtual
environment, the step kit taken from beside the plugin's wheel and everything else from the package index. pip
then finds every requirement met, and both commands answer.

Needs the package index (or pip's cache) for the plugin's dependencies, as `make install` does.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.distcache import copy_python_dists
from towline_dev.packaging import STEP_KIT

SECTION = (REPO_ROOT / "README.md").read_text().split("### 4. Install the `kubectl towline` plugin", 1)[1] \
    .split("\n### ", 1)[0]
VENV = "~/.local/share/towline"


def readme_commands() -> list[list[str]]:
    """The section's console commands that make the environment and install into it, as argument lists."""
    block = re.search(r"```console\n(.*?)```", SECTION, re.S)
    assert block is not None, "no console block in README's plugin install"
    commands = [shlex.split(line[2:]) for line in block[1].splitlines() if line.startswith("$ ")]
    return [words for words in commands if "venv" in words or any(word.endswith("/pip") for word in words)]


def test_readmes_plugin_install_takes_the_step_kit_from_beside_the_wheel(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    for project in (".", STEP_KIT):
        copy_python_dists("0.1.0", dist, project)
    assert {path.name for path in dist.glob("*.whl")} == {"towline-0.1.0-py3-none-any.whl",
                                                          "towline_step-0.1.0-py3-none-any.whl"}
    venv = tmp_path / "venv"
    # A clean environment: nothing of this checkout's virtual environment leaks into the new one.
    env = {key: value for key, value in os.environ.items()
           if key in {"PATH", "HOME", "LANG", "PIP_CACHE_DIR", "PIP_INDEX_URL", "PIP_CERT"}
           or key.lower().endswith("_proxy")}
    env["PIP_CONSTRAINT"] = str(REPO_ROOT / "images" / "constraints.txt")
    commands = readme_commands()
    assert len(commands) == 2, commands
    for words in commands:
        argv = [word.replace(VENV, str(venv)) for word in words]
        ran = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False)
        assert ran.returncode == 0, f"{shlex.join(words)}:\n{ran.stdout}{ran.stderr}"

    checked = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "check"], env=env, capture_output=True,
                             text=True, timeout=120, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for command in ("kubectl-towline", "towline"):
        helped = subprocess.run([str(venv / "bin" / command), "--help"], env=env, capture_output=True, text=True,
                                timeout=120, check=False)
        assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stdout + helped.stderr
    located = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import importlib.metadata as m, towline_step; "
                              "print(m.version('towline-step'), towline_step.__file__)"],
                             env=env, capture_output=True, text=True, timeout=60, check=False)
    assert located.stdout.startswith("0.1.0 ") and str(venv) in located.stdout, located.stdout + located.stderr
    offered = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "from towline.plugin.ui.editor import examples_directory; print(examples_directory())"],
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    # The in-cluster web view's editor offers the examples from the wheel's data files, byte for byte.
    shipped = Path(offered.stdout.strip())
    assert shipped == venv / "share" / "towline" / "examples", offered.stdout + offered.stderr
    expected = sorted((REPO_ROOT / "examples").glob("*.yaml"))
    assert expected and sorted(p.name for p in shipped.glob("*.yaml")) == [p.name for p in expected]
    assert all((shipped / p.name).read_bytes() == p.read_bytes() for p in expected)
