"""Read a WebAssembly module's imports and exports without running it: the checks of a ``code.wasm`` step.

The operator's offline validation and the runner both look at a module before wasmtime instantiates it, so a
module that cannot run as a Towline code step (a component, a library, one that imports functions Towline does
not provide) is refused with a message that names the problem and the fix, instead of wasmtime's "unknown
import" at run time. Standard library only: the operator and the offline validator carry no wasmtime.

Only the header, the section headers, the import section and the export section are parsed; every other section
is skipped by its size and nothing is validated beyond that. wasmtime's own check, when it compiles the module,
stays the last word.
"""

from __future__ import annotations

from dataclasses import dataclass

WASI_MODULE = "wasi_snapshot_preview1"

WASI_PREVIEW1_FUNCTIONS: frozenset[str] = frozenset(
    {
        "args_get", "args_sizes_get", "environ_get", "environ_sizes_get", "clock_res_get", "clock_time_get",
        "fd_advise", "fd_allocate", "fd_close", "fd_datasync", "fd_fdstat_get", "fd_fdstat_set_flags",
        "fd_fdstat_set_rights", "fd_filestat_get", "fd_filestat_set_size", "fd_filestat_set_times", "fd_pread",
        "fd_prestat_get", "fd_prestat_dir_name", "fd_pwrite", "fd_read", "fd_readdir", "fd_renumber", "fd_seek",
        "fd_sync", "fd_tell", "fd_write", "path_create_directory", "path_filestat_get", "path_filestat_set_times",
        "path_link", "path_open", "path_readlink", "path_remove_directory", "path_rename", "path_symlink",
        "path_unlink_file", "poll_oneoff", "proc_exit", "proc_raise", "sched_yield", "random_get", "sock_accept",
        "sock_recv", "sock_send", "sock_shutdown",
    }
)
"""Every function of WASI preview 1 (the ``wasi_snapshot_preview1`` witx). All of them may be imported: the
sandbox gives the module no preopened directory and no socket, so the path_* and sock_* functions have nothing
to act on and return an error, and the rest see only stdin, stdout, stderr, the clocks, randomness and the
environment the runner chose."""

_KINDS = ("func", "table", "memory", "global", "tag")
_IMPORT_SECTION = 2
_EXPORT_SECTION = 7


class ModuleError(ValueError):
    """The bytes are not a core WebAssembly module this reader can read; the message says what and where."""


@dataclass(frozen=True)
class ModuleReport:
    """What a module imports and exports, in the order of its sections."""

    imports: tuple[tuple[str, str, str], ...]  # (module, name, kind: "func"|"table"|"memory"|"global"|"tag")
    exports: tuple[tuple[str, str], ...]  # (name, kind)


class _Reader:
    def __init__(self, data: bytes, position: int, end: int) -> None:
        self.data = data
        self.position = position
        self.end = end

    def fail(self, what: str, at: int | None = None) -> ModuleError:
        return ModuleError(f"malformed at byte {self.position if at is None else at}: {what}")

    def byte(self, what: str) -> int:
        if self.position >= self.end:
            raise self.fail(f"{what} expected, but the {'section' if self.end < len(self.data) else 'file'} ends")
        value = self.data[self.position]
        self.position += 1
        return value

    def unsigned(self, what: str, bits: int = 32) -> int:
        """An unsigned LEB128 integer of at most ``bits`` bits."""
        start, result, shift = self.position, 0, 0
        while True:
            byte = self.byte(f"{what}: the next byte of its LEB128 integer" if shift else what)
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
            if shift >= bits:
                raise self.fail(f"{what}: LEB128 integer longer than {(bits + 6) // 7} bytes", start)
        if result >> bits:
            raise self.fail(f"{what}: LEB128 integer does not fit in {bits} bits", start)
        return result

    def skip_signed(self, what: str) -> None:
        """A signed LEB128 integer (a heap type's s33), skipped."""
        for _ in range(5):
            if not self.byte(what) & 0x80:
                return
        raise self.fail(f"{what}: LEB128 integer longer than 5 bytes")

    def name(self, what: str) -> str:
        length = self.unsigned(f"length of {what}")
        start = self.position
        if length > self.end - start:
            raise self.fail(f"{what} of {length} bytes runs past the end of its section", start)
        self.position += length
        try:
            return self.data[start : self.position].decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(f"{what} is not valid UTF-8 ({error.reason})", start + error.start) from None

    def reftype(self, code: int) -> None:
        if code in (0x63, 0x64):  # (ref null? heaptype)
            self.skip_signed("heap type")
        elif not 0x69 <= code <= 0x74:  # the abbreviated reference types: funcref, externref, anyref, ...
            raise self.fail(f"unknown reference type 0x{code:02x}", self.position - 1)

    def valtype(self) -> None:
        code = self.byte("value type")
        if not 0x7B <= code <= 0x7F:  # i32, i64, f32, f64, v128
            self.reftype(code)

    def limits(self, what: str, allowed_flags: int) -> None:
        """Limits: 0x01 has a maximum, 0x02 shared, 0x04 64-bit (memory64, table64), 0x08 custom page size."""
        flags = self.byte(f"{what} limits")
        if flags & ~allowed_flags:
            raise self.fail(f"unknown {what} limits flags 0x{flags:02x}", self.position - 1)
        bits = 64 if flags & 0x04 else 32
        self.unsigned(f"{what} minimum", bits)
        if flags & 0x01:
            self.unsigned(f"{what} maximum", bits)
        if flags & 0x08:
            self.unsigned(f"{what} page size")

    def kind(self, what: str) -> str:
        code = self.byte(f"{what} kind")
        if code >= len(_KINDS):
            raise self.fail(f"unknown {what} kind 0x{code:02x}", self.position - 1)
        return _KINDS[code]

    def import_entry(self) -> tuple[str, str, str]:
        module = self.name("import module name")
        name = self.name("import name")
        kind = self.kind("import")
        if kind in ("func", "tag"):
            if kind == "tag":
                self.byte("tag attribute")
            self.unsigned("type index")
        elif kind == "table":
            self.reftype(self.byte("table element type"))
            self.limits("table", 0x05)
        elif kind == "memory":
            self.limits("memory", 0x0F)
        else:
            self.valtype()
            if self.byte("global mutability") > 1:
                raise self.fail("global mutability must be 0 or 1", self.position - 1)
        return module, name, kind

    def export_entry(self) -> tuple[str, str]:
        name = self.name("export name")
        kind = self.kind("export")
        self.unsigned("export index")
        return name, kind


def read_module(data: bytes) -> ModuleReport:
    """The imports and exports of a core module; raises ModuleError for anything else or anything malformed."""
    if data[:4] != b"\0asm":
        seen = "this one is empty" if not data else f"this one starts with {data[:4]!r}"
        hint = " (WebAssembly text? compile it to the binary format first)" if data.lstrip()[:1] == b"(" else ""
        raise ModuleError(f"not a WebAssembly module: a .wasm file starts with the bytes \\0asm; {seen}{hint}")
    if len(data) < 8:
        raise ModuleError(f"malformed at byte {len(data)}: the file ends inside its 4-byte version")
    if data[4:8] != b"\x01\0\0\0":
        raise ModuleError(
            f"not a core WebAssembly module: its version is {data[4:8].hex(' ')}, not 01 00 00 00; it is probably "
            "a component (version 0x0d..), and Towline runs core modules for WASI preview 1: build for wasip1 "
            "(e.g. GOOS=wasip1 GOARCH=wasm, or Rust's wasm32-wasip1 target)"
        )
    imports: list[tuple[str, str, str]] = []
    exports: list[tuple[str, str]] = []
    reader = _Reader(data, 8, len(data))
    while reader.position < len(data):
        section_id = reader.byte("section id")
        size = reader.unsigned(f"size of section {section_id}")
        start = reader.position
        if size > len(data) - start:
            raise reader.fail(f"section {section_id} claims {size} bytes, but {len(data) - start} remain", start)
        body = _Reader(data, start, start + size)
        if section_id == _IMPORT_SECTION:
            imports.extend(body.import_entry() for _ in range(body.unsigned("import count")))
        elif section_id == _EXPORT_SECTION:
            exports.extend(body.export_entry() for _ in range(body.unsigned("export count")))
        else:
            body.position = body.end
        if body.position != body.end:
            raise body.fail(f"section {section_id} has {body.end - body.position} bytes after its last entry")
        reader.position = body.end
    return ModuleReport(imports=tuple(imports), exports=tuple(exports))


def _shown(text: str) -> str:
    return text if text.isprintable() and text else repr(text)


def module_problems(data: bytes) -> list[str]:
    """Every reason the module cannot run as a Towline code step, one line each; empty when it can."""
    try:
        report = read_module(data)
    except ModuleError as error:
        return [str(error)]
    problems: list[str] = []
    for module, name, kind in report.imports:
        what = f"{_shown(module)}.{_shown(name)}" + ("" if kind == "func" else f" (a {kind})")
        if module != WASI_MODULE:
            problems.append(
                f"imports {what}, which Towline does not provide: a code.wasm module may import only WASI "
                f"preview 1 functions ({WASI_MODULE}.*); build it for wasip1, e.g. GOOS=wasip1 GOARCH=wasm"
            )
        elif kind != "func" or name not in WASI_PREVIEW1_FUNCTIONS:
            problems.append(f"imports {what}, which is not a WASI preview 1 function")
    if ("_start", "func") not in report.exports:
        problems.append(
            "exports no _start function: build a WASI command (a program with main), not a library (reactor)"
        )
    if ("memory", "memory") not in report.exports:
        problems.append(
            'exports no memory named "memory": WASI preview 1 reads and writes through it; wasip1 toolchains '
            "export it by default, so keep their default"
        )
    return problems
