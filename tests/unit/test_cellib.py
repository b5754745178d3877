"""CEL and httpx without their command lines: expressions evaluate and requests go out as before, and no
process that runs a connector or evaluates an expression loads rich, prompt_toolkit, typer, click or
pygments (the CEL package's REPL and httpx's CLI: about a second of CPU per process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

REPL_PACKAGES = ("rich", "prompt_toolkit", "typer", "click", "pygments")


def loaded_by(module: str) -> set[str]:
    script = (f"import sys, json, {module}; "
              "print(json.dumps(sorted(name for name, loaded in sys.modules.items() if loaded is not None)))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    return {name.split(".")[0] for name in json.loads(result.stdout)}


@pytest.mark.parametrize("module", ["towline.expressions", "towline_connectors.transform", "towline_connectors.http",
                                    "towline.plugin.cli"])
def test_evaluating_processes_do_not_load_the_cel_repl(module: str) -> None:
    loaded = loaded_by(module)
    assert "cel" in loaded
    assert not loaded & set(REPL_PACKAGES)


def test_the_check_sees_the_front_ends_when_the_packages_are_imported_plainly() -> None:
    assert {"rich", "prompt_toolkit", "typer"} <= loaded_by("cel")
    assert {"click", "rich"} <= loaded_by("httpx")


def test_expressions_evaluate_through_the_package_api() -> None:
    from towline.expressions import evaluate_condition  # noqa: PLC0415 - after the subprocess checks, in-process

    assert evaluate_condition("params.n > 2 && 'x' in params.tags", {"params": {"n": 3, "tags": ["x"]}}) is True
