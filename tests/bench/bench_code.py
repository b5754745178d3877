"""What a code.wasm step's module costs inside the pod: compile, instantiate and run, with fuel metering on.

For the Go example (examples/code-steps/wasm-go, built into the cache) and a small WAT module
(tests/fixtures/wasm/greet.wat), each measured `ROUNDS` times in this process, as the host process
(towline_connectors.codehost) does it: an engine with fuel, a store with the step's limits, WASI
with stdin from a file and stdout to a bounded buffer. Also the whole host process for each kind
(start the interpreter, read the request, run, write the result) through `run_sandboxed`.
Prints figures; asserts nothing. Run: `python -m tests.bench.bench_code`.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import wasmtime

from towline_connectors.codesandbox import SandboxLimits, run_sandboxed
from towline_dev.wasmexamples import build_go_example

ROUNDS = 5
FIXTURES = Path(__file__).parents[1] / "fixtures" / "wasm"
ORDER = {"items": [{"name": "pump", "price": 120.5}, {"name": "hose", "price": 35}], "taxRate": 0.2}


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def _phases(module_bytes: bytes, stdin: Path) -> tuple[float, float, float, int]:
    config = wasmtime.Config()
    config.consume_fuel = True
    engine = wasmtime.Engine(config)
    compile_s, module = _timed(lambda: wasmtime.Module(engine, module_bytes))
    store = wasmtime.Store(engine)
    store.set_fuel(2_000_000_000)
    store.set_limits(memory_size=64 << 20, instances=1, memories=1, tables=4)
    wasi = wasmtime.WasiConfig()
    wasi.stdin_file = str(stdin)
    wasi.stdout_custom = lambda chunk: None
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    instantiate_s, instance = _timed(lambda: linker.instantiate(store, module))
    start = instance.exports(store)["_start"]

    def run() -> None:
        try:
            start(store)
        except wasmtime.ExitTrap as exit_trap:
            assert exit_trap.code == 0

    run_s, _ = _timed(run)
    return compile_s, instantiate_s, run_s, 2_000_000_000 - store.get_fuel()


def _line(label: str, samples: list[float]) -> str:
    return f"{label} median {statistics.median(samples) * 1000:.1f} ms (min {min(samples) * 1000:.1f}, " \
           f"max {max(samples) * 1000:.1f})"


def main() -> None:
    go = build_go_example(print)
    modules = {"Go example (enrich.wasm)": go.read_bytes(),
               "WAT greet": bytes(wasmtime.wat2wasm((FIXTURES / "greet.wat").read_text()))}
    with tempfile.TemporaryDirectory() as scratch:
        stdin = Path(scratch) / "inputs.json"
        stdin.write_text('{"items":[{"name":"pump","price":120.5}],"taxRate":0.2}')
        for label, data in modules.items():
            rounds = [_phases(data, stdin) for _ in range(ROUNDS)]
            print(f"{label}, {len(data):,} bytes, {ROUNDS} rounds, fuel metering on:")
            print(f"  {_line('compile', [r[0] for r in rounds])}; {_line('instantiate', [r[1] for r in rounds])}; "
                  f"{_line('run _start', [r[2] for r in rounds])}; fuel used {rounds[0][3]:,}")
    limits = SandboxLimits(wall_seconds=60, max_processes=4096, address_space_bytes=256 << 20)
    host: dict[str, list[float]] = {"python": [], "wasm (Go example)": []}
    for _ in range(ROUNDS):
        python = run_sandboxed({"kind": "python", "inputs": {"n": 1},
                                "source": "def main(inputs):\n    return {'n': inputs['n'] + 1}\n"},
                               b"", limits, lambda line: None)
        host["python"].append(python.seconds)
        wasm = run_sandboxed({"kind": "wasm", "inputs": ORDER, "fuel": 2_000_000_000, "memoryBytes": 64 << 20,
                              "outputLimit": 4096, "env": {}}, modules["Go example (enrich.wasm)"],
                             SandboxLimits(wall_seconds=60, max_processes=4096), lambda line: None)
        host["wasm (Go example)"].append(wasm.seconds)
        assert python.document and python.document["ok"] and wasm.document and wasm.document["ok"]
    print("The host process as the runner starts it (interpreter start to result):")
    for label, samples in host.items():
        print(f"  {_line(label, samples)}")


if __name__ == "__main__":
    main()
