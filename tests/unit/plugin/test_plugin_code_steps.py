"""`kubectl towline validate` on code steps, offline: Python compiled, wasm modules in ConfigMaps checked."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import wasmtime
import yaml

from towline.plugin.cli import main
from towline.plugin.offline import validate_files

REPO = Path(__file__).parents[3]
EXAMPLES = sorted(str(p) for p in (REPO / "examples" / "code-steps").glob("*/workflow.yaml"))
WAT = REPO / "tests" / "fixtures" / "wasm"


def module(name: str) -> str:
    return base64.b64encode(bytes(wasmtime.wat2wasm((WAT / f"{name}.wat").read_text()))).decode()


def write(tmp_path: Path, *documents: object) -> str:
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


def wasm_workflow(key: str, config_map: str = "mods") -> dict[str, object]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "wf"}, "spec": {"steps": [
        {"id": "run", "action": "code.wasm", "with": {"module": {"configMap": {"name": config_map, "key": key}}}}]}}


def test_the_code_step_examples_are_valid_offline() -> None:
    assert len(EXAMPLES) == 2
    lines, problems = validate_files(EXAMPLES)
    assert problems == 0, lines


def test_a_python_syntax_error_is_reported_with_the_field_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "wf"},
                            "spec": {"steps": [{"id": "shape", "action": "code.python",
                                                "with": {"source": "def main(inputs)\n    return 1\n"}}]}})
    assert main(["validate", path]) == 1
    out = capsys.readouterr().out
    assert "wf: spec.steps[0].with.source: is not valid Python: expected ':' (line 1" in out, out


def test_a_module_in_a_config_map_among_the_files_is_checked_as_the_runner_checks_it(tmp_path: Path) -> None:
    maps = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mods"},
            "binaryData": {"good": module("greet"), "bad": module("import_env")}, "data": {"text": "x"}}
    lines, problems = validate_files([write(tmp_path, maps, wasm_workflow("good"))])
    assert (problems, lines[-1]) == (0, f"{tmp_path / 'docs.yaml'}: wf: valid"), lines
    lines, problems = validate_files([write(tmp_path, maps, wasm_workflow("bad"))])
    assert problems == 1 and "spec.steps[0].with.module.configMap: imports env.nope, which Towline does not provide" \
        in lines[-1], lines
    lines, problems = validate_files([write(tmp_path, maps, wasm_workflow("text"))])
    assert problems == 1 and "key text is under data (text), not binaryData" in lines[-1], lines


def test_a_config_map_that_is_not_among_the_files_is_named_as_unchecked(tmp_path: Path) -> None:
    lines, problems = validate_files([write(tmp_path, wasm_workflow("k", "elsewhere"))])
    assert problems == 0
    assert any("note: spec.steps[0].with.module.configMap: ConfigMap elsewhere is not among the files" in line
               for line in lines), lines


def leb128(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_a_module_over_a_config_maps_limit_is_reported_with_the_url_alternative(tmp_path: Path) -> None:
    """A valid module made 1 MiB + 1 byte by a custom section (which changes nothing it does)."""
    greet = bytes(wasmtime.wat2wasm((WAT / "greet.wat").read_text()))
    name = b"padding"
    body = leb128(len(name)) + name
    body += b"\0" * (1_048_576 + 1 - len(greet) - 1 - len(leb128(len(body) + 1_048_576)) - len(body))
    big = greet + b"\0" + leb128(len(body)) + body
    assert len(big) == 1_048_577 and wasmtime.Module(wasmtime.Engine(), big) is not None
    maps = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mods"},
            "binaryData": {"big": base64.b64encode(big).decode()}}
    lines, problems = validate_files([write(tmp_path, maps, wasm_workflow("big"))])
    assert problems == 1, lines
    assert "the module is 1048577 bytes, over a ConfigMap's 1 MiB; serve it from a URL pinned by sha256" in lines[-1]
