"""The offline check of a code.wasm module: its imports and exports read from the bytes, and every reason it
cannot run as a Towline code step, before wasmtime ever sees it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import wasmtime

from towline_connectors.wasmcheck import (
    WASI_MODULE,
    WASI_PREVIEW1_FUNCTIONS,
    ModuleError,
    ModuleReport,
    module_problems,
    read_module,
)
from towline_dev.wasmexamples import build_go_example

FIXTURES = Path(__file__).parents[1] / "fixtures" / "wasm"
START_AND_MEMORY = (("memory", "memory"), ("_start", "func"))


def wat(text: str) -> bytes:
    """The binary module of WebAssembly text (wat2wasm gives a bytearray)."""
    return bytes(wasmtime.wat2wasm(text))


def fixture(name: str) -> bytes:
    return wat((FIXTURES / f"{name}.wat").read_text())


def wasi(*names: str) -> tuple[tuple[str, str, str], ...]:
    return tuple((WASI_MODULE, name, "func") for name in names)


@pytest.mark.parametrize(
    ("name", "imports"),
    [
        ("echo", wasi("fd_read", "fd_write")),
        ("greet", wasi("fd_read", "fd_write")),
        ("loop", ()),
        ("grow", ()),
        ("import_env", (("env", "nope", "func"),)),
        ("flood", wasi("fd_write")),
        ("exit3", wasi("proc_exit")),
        ("env", wasi("environ_sizes_get", "environ_get", "fd_write")),
    ],
)
def test_each_fixture_reports_its_imports_and_exports(name: str, imports: tuple[tuple[str, str, str], ...]) -> None:
    assert read_module(fixture(name)) == ModuleReport(imports=imports, exports=START_AND_MEMORY)


@pytest.mark.parametrize("name", ["echo", "greet", "loop", "grow", "flood", "exit3", "env"])
def test_the_runnable_fixtures_have_no_problems(name: str) -> None:
    assert module_problems(fixture(name)) == []


def test_every_kind_of_import_and_export_is_read() -> None:
    module = wat("""(module
      (import "env" "m64" (memory i64 1 2))
      (import "env" "shared" (memory 1 2 shared))
      (import "env" "small_pages" (memory 1 (pagesize 1)))
      (import "env" "t" (table 1 funcref))
      (import "env" "t64" (table i64 1 10 externref))
      (import "env" "tref" (table 1 (ref func)))
      (import "env" "g" (global (mut i32)))
      (import "env" "gv" (global v128))
      (import "env" "gr" (global externref))
      (import "env" "e" (tag (param i32)))
      (func (export "f"))
      (export "m" (memory 0))
      (export "t" (table 0))
      (export "g" (global 0))
      (export "e" (tag 0)))""")
    report = read_module(module)
    assert [(name, kind) for _, name, kind in report.imports] == [
        ("m64", "memory"), ("shared", "memory"), ("small_pages", "memory"), ("t", "table"), ("t64", "table"),
        ("tref", "table"), ("g", "global"), ("gv", "global"), ("gr", "global"), ("e", "tag"),
    ]
    assert report.exports == (("f", "func"), ("m", "memory"), ("t", "table"), ("g", "global"), ("e", "tag"))


def test_names_are_utf8() -> None:
    module = wat('(module (import "wasi_snapshot_preview1" "fd_write" (func)) (func (export "ü")))')
    assert read_module(module).exports == (("ü", "func"),)
    broken = module.replace("ü".encode(), b"\xff\xfe")
    with pytest.raises(ModuleError, match=r"^malformed at byte \d+: export name is not valid UTF-8"):
        read_module(broken)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", r"^not a WebAssembly module: a \.wasm file starts with the bytes \\0asm; this one is empty$"),
        (b"\x7fELF\x02\x01\x01", r"^not a WebAssembly module: .* this one starts with b'\\x7fELF'$"),
        (b'(module (func (export "_start")))', r"this one starts with b'\(mod' \(WebAssembly text\? compile it"),
        (b"\0asm\x01\0", r"^malformed at byte 6: the file ends inside its 4-byte version$"),
        (b"\0asm\x0d\0\x01\0", r"^not a core WebAssembly module: its version is 0d 00 01 00, not 01 00 00 00; it "
                               r"is probably a component \(version 0x0d\.\.\), and Towline runs core modules for "
                               r"WASI preview 1"),
        (b"\0asm\x02\0\0\0", r"^not a core WebAssembly module: its version is 02 00 00 00"),
    ],
)
def test_not_a_core_module(data: bytes, message: str) -> None:
    with pytest.raises(ModuleError, match=message):
        read_module(data)
    problems = module_problems(data)
    assert len(problems) == 1
    assert problems[0].startswith(("not a WebAssembly module", "not a core WebAssembly module", "malformed"))


def test_malformed_sections_name_the_byte() -> None:
    header = b"\0asm\x01\0\0\0"
    cases = {
        header + b"\x01": r"^malformed at byte 9: size of section 1 expected, but the file ends$",
        header + b"\x01\x80\x80": r"^malformed at byte 11: size of section 1: the next byte of its "
                                    r"LEB128 integer expected, but the file ends$",
        header + b"\x01\xff\xff\xff\xff\xff\x01": r"^malformed at byte 9: size of section 1: LEB128 integer longer "
                                                  r"than 5 bytes$",
        header + b"\x01\xff\xff\xff\xff\x7f": r"^malformed at byte 9: size of section 1: LEB128 integer does not "
                                              r"fit in 32 bits$",
        header + b"\x01\x05\x00": r"^malformed at byte 10: section 1 claims 5 bytes, but 1 remain$",
        header + b"\x02\x01\x01": r"^malformed at byte 11: length of import module name expected, but the file ends",
        header + b"\x02\x03\x01\x05a": r"^malformed at byte 12: import module name of 5 bytes runs past the end",
        header + b"\x07\x04\x01\x01f\x09": r"^malformed at byte 13: unknown export kind 0x09$",
        header + b"\x07\x05\x00\x00\x00\x00\x00": r"^malformed at byte 11: section 7 has 4 bytes after its last entry",
    }
    for data, message in cases.items():
        with pytest.raises(ModuleError, match=message):
            read_module(data)


def test_every_truncation_and_every_flipped_byte_is_a_module_error_or_a_report() -> None:
    module = fixture("echo")
    for end in range(len(module)):
        try:
            read_module(module[:end])
        except ModuleError:
            continue
    for position in range(len(module)):
        for value in (0x00, 0x7F, 0x80, 0xFF):
            try:
                read_module(module[:position] + bytes([value]) + module[position + 1 :])
            except ModuleError:
                continue
    with pytest.raises(ModuleError, match=r"^malformed at byte \d+: "):
        read_module(module[: len(module) // 2])


def test_an_import_towline_does_not_provide() -> None:
    assert module_problems(fixture("import_env")) == [
        "imports env.nope, which Towline does not provide: a code.wasm module may import only WASI preview 1 "
        "functions (wasi_snapshot_preview1.*); build it for wasip1, e.g. GOOS=wasip1 GOARCH=wasm"
    ]


def test_a_wasi_import_that_is_not_a_preview1_function() -> None:
    module = wat("""(module
      (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "sock_open" (func))
      (import "wasi_snapshot_preview1" "memory" (memory 1))
      (export "memory" (memory 0))
      (func (export "_start")))""")
    assert module_problems(module) == [
        "imports wasi_snapshot_preview1.sock_open, which is not a WASI preview 1 function",
        "imports wasi_snapshot_preview1.memory (a memory), which is not a WASI preview 1 function",
    ]


def test_a_memory_imported_from_env_is_named_with_its_kind() -> None:
    module = wat(
        '(module (import "env" "memory" (memory 1)) (export "memory" (memory 0)) (func (export "_start")))'
    )
    assert module_problems(module) == [
        "imports env.memory (a memory), which Towline does not provide: a code.wasm module may import only WASI "
        "preview 1 functions (wasi_snapshot_preview1.*); build it for wasip1, e.g. GOOS=wasip1 GOARCH=wasm"
    ]


def test_a_library_without_start_or_memory() -> None:
    reactor = wat('(module (memory 1) (func (export "_initialize")) (func (export "run")))')
    assert module_problems(reactor) == [
        "exports no _start function: build a WASI command (a program with main), not a library (reactor)",
        'exports no memory named "memory": WASI preview 1 reads and writes through it; wasip1 toolchains export it '
        "by default, so keep their default",
    ]
    start_is_a_global = wat(
        '(module (memory (export "memory") 1) (global (export "_start") i32 (i32.const 0)))'
    )
    assert module_problems(start_is_a_global) == [
        "exports no _start function: build a WASI command (a program with main), not a library (reactor)"
    ]


def test_every_problem_is_reported_at_once() -> None:
    module = wat('(module (import "env" "a" (func)) (import "env" "b" (func)))')
    assert [problem.split(",")[0].split(":")[0] for problem in module_problems(module)] == [
        "imports env.a", "imports env.b", "exports no _start function", 'exports no memory named "memory"',
    ]


def test_odd_names_are_shown_quoted_on_one_line() -> None:
    module = wat('(module (import "env\\n" "" (func)) (memory (export "memory") 1) '
                               '(func (export "_start")))')
    (problem,) = module_problems(module)
    assert problem.startswith("imports 'env\\n'.'', which Towline does not provide")
    assert "\n" not in problem


def test_the_preview1_list_is_what_wasmtime_defines() -> None:
    """Each listed name is defined by wasmtime's WASI preview 1 (a wrong signature is "incompatible", not
    "unknown"), and a name outside the list is unknown to it."""
    assert len(WASI_PREVIEW1_FUNCTIONS) == 46
    engine = wasmtime.Engine()
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    for name in [*sorted(WASI_PREVIEW1_FUNCTIONS), "sock_open"]:
        module = wasmtime.Module(engine, wat(f'(module (import "{WASI_MODULE}" "{name}" '
                                                           "(func (param f64))))"))
        store = wasmtime.Store(engine)
        store.set_wasi(wasmtime.WasiConfig())
        with pytest.raises(wasmtime.WasmtimeError) as refused:
            linker.instantiate(store, module)
        expected = "unknown import" if name == "sock_open" else "incompatible import type"
        assert expected in str(refused.value), (name, str(refused.value))


@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed: the Go example cannot be built")
def test_the_go_example_passes() -> None:
    module = build_go_example(progress=lambda _message: None).read_bytes()
    assert module_problems(module) == []
    report = read_module(module)
    assert {kind for _, _, kind in report.imports} == {"func"}
    assert {module for module, _, _ in report.imports} == {WASI_MODULE}
    assert {("_start", "func"), ("memory", "memory")} <= set(report.exports)
