"""The process a code step's code runs in: `python3 -I -m towline_connectors.codehost`, started by codesandbox.

Why a process of its own: the limits a step declares (memory, processes) are
set here with `setrlimit` before the user's code exists, and no code the user
wrote shares an interpreter with the runner that writes the result document.
The runner keeps the deadline: it kills this process's group when time is up.

Protocol with the runner (towline_connectors.codesandbox):
  stdin   one JSON line, the request (`kind`, `inputs`, limits, the fd numbers
          below; `source` for Python), then for WebAssembly `moduleBytes` bytes
          of module
  fd R    (`resultFd`) one JSON document: `{"ok": true, "output": ...}` (Python), `{"ok": true,
          "stdout": "..."}` (WebAssembly: the module's stdout, at most `outputLimit` bytes), or
          `{"ok": false, "errorClass": ..., "message": ..., "retryAfterSeconds": ...}`
  stdout  Python's `print`, and stderr (a module's too): the step's log, redacted by the runner

Only the process that started writes the result: a child the code forked and
left behind finds a different pid and exits silently.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import runpy
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from towline_connectors.wasmcheck import module_problems
from towline_step.protocol import EXIT_RETRYABLE, ErrorClass

ENTRY_POINT = "main"
SOURCE_FILE = "step_code.py"
"""The file name Python tracebacks show for the step's source (lines are the source's own)."""
RESULT_DOCUMENT_LIMIT = 1 << 20
"""What the host itself writes to the result fd at most; the runner caps what it reads again."""


def _set_limits(request: Mapping[str, Any]) -> None:
    """Hard limits (soft = hard), so the code cannot raise them again; set before the code is read."""
    processes = int(request["maxProcesses"])
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    memory = request.get("addressSpaceBytes")
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (int(memory), int(memory)))
    # When the pod runs out of memory the kernel should pick the code, not the runner that reports it.
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")


def _write_result(fd: int, document: Mapping[str, Any]) -> None:
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    data = text.encode()[:RESULT_DOCUMENT_LIMIT]
    with os.fdopen(fd, "wb", closefd=True) as out:
        out.write(data)


def failure(error_class: ErrorClass, message: str, retry_after: float | None = None) -> dict[str, Any]:
    return {"ok": False, "errorClass": error_class.value, "message": message, "retryAfterSeconds": retry_after}


def _exception_failure(exc: BaseException) -> dict[str, Any]:
    """An exception of the code as a step failure: its class and message, and where in the source it came from.

    An exception carrying a step-protocol error class (the step kit's TransientError, RateLimitedError ...)
    keeps that class; everything else is `permanent`.
    """
    declared = getattr(type(exc), "error_class", None)
    error_class = declared if isinstance(declared, ErrorClass) else ErrorClass.PERMANENT
    retry_after = getattr(exc, "retry_after_seconds", None)
    where = ""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if frame.filename.endswith(SOURCE_FILE)]
    if frames:
        where = f" (line {frames[-1].lineno} of the step's source)"
    text = str(exc).strip()
    message = f"{type(exc).__name__}: {text}{where}" if text else f"{type(exc).__name__}{where}"
    return failure(error_class, message, retry_after if isinstance(retry_after, (int, float)) else None)


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback from the first frame of the step's source on (the host's own frames say nothing to its author)."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.endswith(SOURCE_FILE):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__, file=sys.stderr)


def run_python(request: Mapping[str, Any]) -> dict[str, Any]:
    """Load the source as a module, call `main(inputs)`, and return its JSON-serialisable value as the output."""
    with tempfile.TemporaryDirectory(prefix="towline-code-") as scratch:
        path = Path(scratch) / SOURCE_FILE
        path.write_text(str(request["source"]), encoding="utf-8")
        namespace = runpy.run_path(str(path), run_name="step_code")
        entry = namespace.get(ENTRY_POINT)
        if not callable(entry):
            return failure(ErrorClass.VALIDATION, "the source defines no function main(inputs); add one")
        output = entry(request.get("inputs") or {})
    try:
        json.dumps(output, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return failure(ErrorClass.PERMANENT, f"main returned a value that is not JSON ({exc}); return dicts, lists, "
                                             "strings, numbers, booleans or None")
    return {"ok": True, "output": output}


class BoundedOutput:
    """The module's stdout, kept up to `limit` bytes; a write past it fails with EFBIG, is remembered, and stops it.

    Stopping matters: host calls cost no fuel, so a module that ignores EFBIG and writes on would
    spin through millions of calls (minutes on a busy node) before its fuel or the deadline ends it.
    `on_overflow` (the engine's epoch tick) makes its next loop back-edge or call trap instead.
    """

    def __init__(self, limit: int, on_overflow: Callable[[], None] = lambda: None) -> None:
        self.limit = limit
        self.data = bytearray()
        self.overflowed = False
        self._on_overflow = on_overflow

    def write(self, chunk: bytes) -> int:
        if len(self.data) + len(chunk) > self.limit:
            if not self.overflowed:
                self.overflowed = True
                self._on_overflow()
            return -errno.EFBIG
        self.data += chunk
        return len(chunk)


def run_wasm(request: Mapping[str, Any], module: bytes) -> dict[str, Any]:
    """Instantiate the module with WASI (stdin: the inputs; stdout: the output) and run `_start` on its fuel.

    No directory is preopened, no socket exists, the environment is only `with.env`, and the
    arguments are just the program name: WASI's path and socket calls have nothing to act on.
    """
    problems = module_problems(module)
    if problems:
        return failure(ErrorClass.VALIDATION, "; ".join(problems))
    failed, fuel_used, output = _run_start(request, module)
    if output.overflowed:
        return failure(ErrorClass.OUTPUT_TOO_LARGE, f"the module wrote more than {output.limit} bytes to stdout, "
                                                    "the result limit; write a smaller JSON document")
    if failed is not None:
        return failed
    return {"ok": True, "stdout": output.data.decode("utf-8", "replace"), "fuelUsed": fuel_used}


def _run_start(request: Mapping[str, Any], module: bytes) -> tuple[dict[str, Any] | None, int, BoundedOutput]:
    """Run `_start`; the failure it ended with (None: it returned or exited 0), the fuel it used, its stdout."""
    import wasmtime  # noqa: PLC0415 - only a WebAssembly step pays for loading wasmtime

    fuel, memory = int(request["fuel"]), int(request["memoryBytes"])
    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    engine = wasmtime.Engine(config)
    store = wasmtime.Store(engine)
    store.set_fuel(fuel)
    store.set_epoch_deadline(1)
    output = BoundedOutput(int(request["outputLimit"]), on_overflow=engine.increment_epoch)
    store.set_limits(memory_size=memory, instances=1, memories=1, tables=4, table_elements=100_000)
    failed: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="towline-wasm-") as scratch:
        stdin = Path(scratch) / "inputs.json"
        stdin.write_text(json.dumps(request.get("inputs") or {}, separators=(",", ":")), encoding="utf-8")
        wasi = wasmtime.WasiConfig()
        wasi.stdin_file = str(stdin)
        wasi.stdout_custom = output.write
        wasi.inherit_stderr()
        wasi.argv = ["module.wasm"]
        wasi.env = [[str(name), str(value)] for name, value in (request.get("env") or {}).items()]
        store.set_wasi(wasi)
        linker = wasmtime.Linker(engine)
        linker.define_wasi()
        instance = None
        try:
            instance = linker.instantiate(store, wasmtime.Module(engine, module))
            start = instance.exports(store)["_start"]
            if not isinstance(start, wasmtime.Func):
                raise wasmtime.WasmtimeError("the module's _start export is not a function")
            start(store)
        except wasmtime.ExitTrap as exit_trap:
            failed = _exit_failure(exit_trap.code)
        except wasmtime.Trap as trap:
            failed = failure(ErrorClass.PERMANENT, describe_trap(trap, fuel, memory, _memory_in_use(store, instance)))
        except wasmtime.WasmtimeError as error:
            failed = failure(ErrorClass.VALIDATION, f"the module could not be instantiated: {_first_line(error)}")
    return failed, fuel - store.get_fuel(), output


def _exit_failure(code: int) -> dict[str, Any] | None:
    """`proc_exit(code)`: 0 is success, 75 (EX_TEMPFAIL, the step protocol's retryable exit) is transient."""
    if code == 0:
        return None
    if code == EXIT_RETRYABLE:
        return failure(ErrorClass.TRANSIENT, f"the module exited with status {EXIT_RETRYABLE} (worth retrying); "
                                             "its stderr (the step's log) says why")
    return failure(ErrorClass.PERMANENT, f"the module exited with status {code}; its stderr (the step's log) says why")


def _memory_in_use(store: Any, instance: Any) -> int:
    """Bytes of the module's exported linear memory when it trapped (0 when it has none)."""
    import wasmtime  # noqa: PLC0415 - loaded already by the caller

    found = instance.exports(store).get("memory") if instance is not None else None
    return int(found.data_len(store)) if isinstance(found, wasmtime.Memory) else 0


def describe_trap(trap: Exception, fuel: int, memory: int, in_use: int) -> str:
    """A trap in the words a step author needs: which limit was hit and which field raises it.

    A module refused more memory sees `memory.grow` fail and usually traps soon after (Go and Rust
    abort, hand-written code hits `unreachable`); wasmtime does not say a grow was refused, and a
    refused grow may have asked for many pages, so a trap with memory past three quarters of the cap says so.
    """
    code = getattr(trap, "trap_code", None)
    if getattr(code, "name", "") == "OUT_OF_FUEL" or "fuel" in str(trap):
        return (f"the module ran out of fuel ({fuel} units, about one per instruction): it looped or needs more; "
                "raise with.fuel if the work is real")
    if in_use * 4 >= memory * 3:
        return (f"the module trapped with its linear memory at the cap ({in_use} of with.memory {memory} bytes): "
                f"it needed more memory; raise with.memory or use less ({_trap_reason(trap)})")
    return f"the module trapped: {_trap_reason(trap)}"


def _trap_reason(trap: Exception) -> str:
    """wasmtime's own words ("wasm trap: ..."), the last line of its message."""
    lines = [line.strip() for line in str(trap).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(trap).__name__


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _read_request() -> tuple[dict[str, Any], bytes]:
    stream = sys.stdin.buffer
    request = json.loads(stream.readline())
    module = stream.read(int(request.get("moduleBytes") or 0))
    return request, module


def main() -> None:
    start_pid = os.getpid()
    request, module = _read_request()
    result_fd = int(request["resultFd"])
    _set_limits(request)
    document: dict[str, Any]
    try:
        document = run_wasm(request, module) if request["kind"] == "wasm" else run_python(request)
    except SystemExit as exc:
        document = failure(ErrorClass.PERMANENT, f"the code called sys.exit({exc.code!r}) instead of returning; "
                                                 "return a value, or raise an exception to fail the step")
    except MemoryError:
        document = failure(ErrorClass.PERMANENT, "MemoryError: the code needed more than with.memory; raise it or "
                                                 "use less")
    except BaseException as exc:
        if os.getpid() != start_pid:
            os._exit(1)
        _print_user_traceback(exc)
        document = _exception_failure(exc)
    if os.getpid() != start_pid:
        os._exit(0)  # a forked child of the code: only the first process reports
    _write_result(result_fd, document)
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter shutdown: wasmtime's output callbacks may be finalised during it and abort noisily.
    os._exit(0)


if __name__ == "__main__":
    main()
