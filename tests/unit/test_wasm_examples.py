"""The Go example of a code.wasm step (examples/code-steps/wasm-go): built once into the cache outside the
repository, and running under wasmtime as a code step would (WASI preview 1, stdin in, stdout out, on fuel)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import wasmtime

from towline_dev.wasmexamples import GO_EXAMPLE, WasmExampleUnavailable, build_go_example, example_key

needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed: the example cannot be built")
FUEL = 3_000_000_000


@dataclass(frozen=True)
class Ran:
    exit_code: int
    stdout: bytes
    stderr: bytes
    fuel_used: int


def run(engine: wasmtime.Engine, module: wasmtime.Module, stdin: bytes, directory: Path) -> Ran:
    (directory / "stdin").write_bytes(stdin)
    wasi = wasmtime.WasiConfig()
    wasi.argv = ["enrich"]
    wasi.stdin_file = directory / "stdin"
    wasi.stdout_file = str(directory / "stdout")
    wasi.stderr_file = str(directory / "stderr")
    store = wasmtime.Store(engine)
    store.set_wasi(wasi)
    store.set_fuel(FUEL)
    store.set_limits(memory_size=64 << 20)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    start = linker.instantiate(store, module).exports(store)["_start"]
    assert isinstance(start, wasmtime.Func)
    try:
        start(store)
        exit_code = 0
    except wasmtime.ExitTrap as exited:  # Go's main ends with proc_exit, 0 included
        exit_code = exited.code
    return Ran(exit_code, (directory / "stdout").read_bytes(), (directory / "stderr").read_bytes(),
               FUEL - store.get_fuel())


@pytest.fixture(scope="module")
def compiled() -> tuple[wasmtime.Engine, wasmtime.Module]:
    path = build_go_example(progress=lambda _message: None)
    config = wasmtime.Config()
    config.consume_fuel = True
    engine = wasmtime.Engine(config)
    return engine, wasmtime.Module(engine, path.read_bytes())


@needs_go
def test_the_example_is_built_once_into_the_cache() -> None:
    messages: list[str] = []
    first = build_go_example(progress=messages.append)
    again = build_go_example(progress=messages.append)
    assert again == first
    assert first.name.startswith("enrich-")
    assert first.suffix == ".wasm"
    assert not first.is_relative_to(GO_EXAMPLE.parents[2])
    assert first.read_bytes()[:8] == b"\0asm\x01\0\0\0"
    assert len(messages) in (0, 2)  # built now (start, done) or earlier; never a second time


@needs_go
def test_the_example_enriches_an_order(compiled: tuple[wasmtime.Engine, wasmtime.Module], tmp_path: Path) -> None:
    order = {"items": [{"name": "a", "price": 3}, {"name": "b", "price": 4.5}, {"name": "c", "price": 12.25}],
             "taxRate": 0.2}
    ran = run(*compiled, json.dumps(order).encode(), tmp_path)
    assert ran.exit_code == 0, ran.stderr
    assert json.loads(ran.stdout) == {"count": 3, "total": 19.75, "totalWithTax": pytest.approx(23.7)}
    assert ran.stderr == b"enrich: 3 items\n"
    assert 0 < ran.fuel_used < FUEL // 100


@needs_go
def test_the_example_refuses_bad_input(compiled: tuple[wasmtime.Engine, wasmtime.Module], tmp_path: Path) -> None:
    ran = run(*compiled, b'{"items": 3}', tmp_path)
    assert ran.exit_code == 1
    assert ran.stdout == b""
    assert ran.stderr.startswith(b"enrich: bad input: json: cannot unmarshal number")


def test_the_key_follows_the_sources_and_the_go_version(tmp_path: Path) -> None:
    for name in ("main.go", "go.mod"):
        shutil.copy(GO_EXAMPLE / name, tmp_path / name)
    (tmp_path / "main_test.go").write_text("package main\n")
    (tmp_path / "README.md").write_text("notes\n")
    key = example_key(tmp_path, "go1.26.8")
    assert key == example_key(GO_EXAMPLE, "go1.26.8")  # tests and notes are not inputs
    assert example_key(tmp_path, "go1.27.0") != key
    (tmp_path / "main.go").write_text((tmp_path / "main.go").read_text() + "\n// changed\n")
    assert example_key(tmp_path, "go1.26.8") != key


def test_without_go_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(WasmExampleUnavailable, match=r"needs Go 1\.21 or newer on PATH"):
        build_go_example(progress=lambda _message: None)
