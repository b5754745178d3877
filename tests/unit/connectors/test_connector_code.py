"""code.python and code.wasm as the runner runs them: real host processes, real wasmtime, a real HTTP server.

What only the node can show (the pod's user id and process limit, its read-only root, no token,
NetworkPolicies) is in tests/integration/test_code_steps.py; here: validation, the protocol between
the runner and the host process, limits that hold on any Linux (address space, wall clock, fuel,
linear memory, output size), redaction of what code prints, and module sources.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import wasmtime
from connector_testkit import LoopbackHTTPServer, Reply, make_ctx, run_action, write_secret

from towline_connectors import code_wasm, codehost
from towline_connectors.code_python import SOURCE_LIMIT_BYTES, python_pod_needs
from towline_connectors.code_wasm import wasm_pod_needs
from towline_connectors.codesandbox import LOG_TOTAL_LIMIT, SandboxLimits, run_sandboxed
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.netguard import NetworkRules
from towline_connectors.redact import Redactor
from towline_connectors.registry import validate_inputs
from towline_connectors.runner import run_step

WAT = Path(__file__).parents[2] / "fixtures" / "wasm"


def wat(name: str) -> bytes:
    return bytes(wasmtime.wat2wasm((WAT / f"{name}.wat").read_text()))


def run_code(source: str, inputs: dict[str, Any] | None = None, **extra: Any) -> Any:
    return run_action("code.python", {"source": source, "inputs": inputs or {}, **extra}, make_ctx())


def fails(source: str, deadline: float = 10.0, **extra: Any) -> ActionError:
    with pytest.raises(ActionError) as caught:
        run_action("code.python", {"source": source, **extra}, make_ctx(deadline_seconds=deadline))
    return caught.value


# --- code.python: validation ---------------------------------------------


@pytest.mark.parametrize(("source", "expected"), [
    ("def main(inputs):\n  return (\n", "with.source: is not valid Python: '(' was never closed (line 2"),
    ("x = 1\n", "with.source: defines no top-level function main(inputs)"),
    ("async def main(inputs):\n  return 1\n", "with.source: main must be a plain function"),
    ("def main(a, b):\n  return 1\n", "with.source: main must take exactly one argument"),
    ("def main(inputs):\n  return '${{ params.x }}'\n", "with: source must be written out, not bound"),
    ("#" * (SOURCE_LIMIT_BYTES + 1), f"over the {SOURCE_LIMIT_BYTES}-byte limit"),
])
def test_python_source_is_checked_without_running_it(source: str, expected: str) -> None:
    problems = validate_inputs("code.python", {"source": source})
    assert len(problems) == 1 and expected in problems[0], problems


def test_python_limits_are_checked_and_size_the_pod() -> None:
    [memory] = validate_inputs("code.python", {"source": "def main(i):\n  return 1\n", "memory": "16Mi"})
    assert memory.startswith("with.memory: 16Mi is outside 64Mi..4096Mi"), memory
    [cpu] = validate_inputs("code.python", {"source": "def main(i):\n  return 1\n", "cpu": "lots"})
    assert cpu.startswith("with.cpu:") and "500m" in cpu, cpu
    needs = python_pod_needs({"memory": "256Mi", "cpu": "500m"})
    assert (needs.memory_limit_bytes, needs.cpu_limit, needs.own_user) == ((256 + 160) << 20, "500m", True)


# --- code.python: running -------------------------------------------------


def test_main_gets_the_inputs_and_its_return_value_is_the_output() -> None:
    result = run_code("import statistics\ndef main(inputs):\n    return {'mean': statistics.mean(inputs['xs'])}\n",
                      {"xs": [1, 2, 6]})
    assert result.output == {"mean": 3}


def test_an_exception_is_a_permanent_failure_with_its_class_message_and_line() -> None:
    error = fails("def main(inputs):\n    x = 1\n    raise KeyError('account')\n")
    assert error.error_class is ErrorClass.PERMANENT
    assert error.message == "the code: KeyError: 'account' (line 3 of the step's source)"


def test_the_step_kits_errors_keep_their_class_and_retry_delay() -> None:
    error = fails("from towline_step import RateLimitedError\n"
                  "def main(inputs):\n    raise RateLimitedError('slow down', retry_after_seconds=30)\n")
    assert (error.error_class, error.retry_after_seconds) == (ErrorClass.RATE_LIMIT, 30.0)
    assert error.retryable


@pytest.mark.parametrize(("source", "expected"), [
    ("import sys\ndef main(inputs):\n    sys.exit(3)\n", "called sys.exit(3) instead of returning"),
    ("def main(inputs):\n    return {1, 2}\n", "main returned a value that is not JSON"),
    ("import os\ndef main(inputs):\n    os._exit(4)\n", "exited with status 4 without a result"),
    # Passes the syntax check (a def main exists), but main is rebound: the host refuses it when it runs.
    ("def main(inputs):\n    pass\nmain = 5\n", "defines no function main(inputs)"),
])
def test_code_that_ends_without_a_usable_value_fails_saying_how(source: str, expected: str) -> None:
    assert expected in fails(source).message


def test_memory_past_the_limit_is_a_memory_error_and_the_runner_reports_it() -> None:
    error = fails("def main(inputs):\n    hoard = []\n    while True:\n        hoard.append(bytearray(8 << 20))\n",
                  memory="96Mi")
    assert error.error_class is ErrorClass.PERMANENT
    assert "MemoryError" in error.message and "with.memory" in error.message


def test_the_codes_process_is_the_kernels_first_pick_when_the_pod_runs_out_of_memory() -> None:
    """oom_score_adj 1000: past the pod's limit the OOM killer takes the code, and the runner lives to report it."""
    assert run_code("def main(inputs):\n    return open('/proc/self/oom_score_adj').read().strip()\n").output == "1000"


def test_an_endless_loop_is_stopped_at_the_deadline_as_a_timeout() -> None:
    error = fails("def main(inputs):\n    while True:\n        pass\n", deadline=3.0)
    assert error.error_class is ErrorClass.TIMEOUT
    assert "ran past the step's time limit" in error.message


def test_the_host_process_gets_an_empty_environment_and_cannot_see_the_runners() -> None:
    result = run_code("import os\ndef main(inputs):\n    return sorted(os.environ)\n")
    assert set(result.output) <= {"PATH", "HOME", "LANG", "LC_CTYPE"}, result.output


def test_what_the_code_prints_goes_to_the_step_log_redacted(tmp_path: Path) -> None:
    secret = "code-unit-secret-1f2e3d"
    write_secret(tmp_path, "api", {"token": secret})
    source = ("def main(inputs):\n    print('token', inputs['token'])\n"
              "    import sys\n    print('to stderr', inputs['token'], file=sys.stderr)\n"
              "    return {'echo': inputs['token']}\n")
    environ = {
        "TOWLINE_ACTION": "code.python",
        "TOWLINE_INPUT": json.dumps({"source": source, "inputs": {"token": {"credential": "api", "key": "token"}}}),
        "TOWLINE_CREDENTIALS_DIR": str(tmp_path), "TOWLINE_RESULT_PATH": str(tmp_path / "result.json"),
        "TOWLINE_CREDENTIAL_SECRETS": json.dumps({"api": "api"}),
        "TOWLINE_CREDENTIAL_KEYS": json.dumps({"api": ["token"]}),
    }
    log = io.StringIO()
    result = run_step(environ, redactor=Redactor(), log=log)
    assert result.ok, result
    text = log.getvalue()
    assert "code: token [REDACTED]" in text and "code: to stderr [REDACTED]" in text, text
    assert secret not in text and secret not in (tmp_path / "result.json").read_text()


def test_a_return_value_over_the_result_limit_fails_as_output_too_large(tmp_path: Path) -> None:
    environ = {"TOWLINE_ACTION": "code.python", "TOWLINE_RESULT_PATH": str(tmp_path / "result.json"),
               "TOWLINE_CREDENTIALS_DIR": str(tmp_path),
               "TOWLINE_INPUT": json.dumps({"source": "def main(inputs):\n    return {'rows': 'x' * 10000}\n"})}
    result = run_step(environ, redactor=Redactor(), log=io.StringIO())
    assert not result.ok and result.error_class == ErrorClass.OUTPUT_TOO_LARGE, result
    assert result.message is not None and "over the 4096-byte termination-message limit" in result.message
    assert "return less from main" in result.message
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["errorClass"] == "output_too_large" and written["output"] is None, written


def test_a_flood_of_prints_is_cut_and_the_code_still_finishes() -> None:
    lines: list[str] = []
    outcome = run_sandboxed(
        {"kind": "python", "inputs": {},
         "source": "def main(inputs):\n    for _ in range(3000):\n        print('x' * 5000)\n    return 'done'\n"},
        b"", SandboxLimits(wall_seconds=30, max_processes=4096, address_space_bytes=256 << 20), lines.append)
    assert outcome.document == {"ok": True, "output": "done"}, outcome
    assert outcome.log_cut and sum(len(line) for line in lines) <= LOG_TOTAL_LIMIT + 200
    assert lines[-1] == f"[the code's log was cut at {LOG_TOTAL_LIMIT} bytes]"


def test_what_a_forked_child_leaves_behind_is_killed_and_never_writes_the_result() -> None:
    source = ("import os, time\ndef main(inputs):\n    if os.fork() == 0:\n        time.sleep(60)\n"
              "        return {'from': 'child'}\n    return {'from': 'parent'}\n")
    outcome = run_sandboxed({"kind": "python", "inputs": {}, "source": source}, b"",
                            SandboxLimits(wall_seconds=30, max_processes=4096), lambda line: None)
    assert outcome.document == {"ok": True, "output": {"from": "parent"}}, outcome
    assert outcome.seconds < 30  # the host returned; the sleeping child was killed with its group


# --- code.wasm ------------------------------------------------------------


def sandboxed_wasm(module: bytes, inputs: Any = None, **request: Any) -> Any:
    lines: list[str] = []
    outcome = run_sandboxed(
        {"kind": "wasm", "inputs": inputs or {}, "fuel": 50_000_000, "memoryBytes": 8 << 20, "outputLimit": 4096,
         "env": {}, **request}, module, SandboxLimits(wall_seconds=30, max_processes=4096), lines.append)
    return outcome.document, lines


def test_a_module_reads_its_inputs_on_stdin_writes_its_output_and_logs_to_stderr() -> None:
    assert sandboxed_wasm(wat("echo"), {"a": [1, 2]})[0]["stdout"] == '{"a":[1,2]}'
    document, lines = sandboxed_wasm(wat("greet"))
    assert document["stdout"] == '{"greeting":"hello from wat"}' and lines == ["wat says hi"]


def test_a_module_sees_only_the_environment_the_step_declares() -> None:
    document, _ = sandboxed_wasm(wat("env"), env={"REGION": "eu-1"})
    assert document["stdout"] == "REGION=eu-1\0"
    assert sandboxed_wasm(wat("env"))[0]["stdout"] == ""


@pytest.mark.parametrize(("name", "request_", "error_class", "expected"), [
    ("loop", {}, "permanent", "ran out of fuel (50000000 units"),
    ("grow", {}, "permanent", "linear memory at the cap"),
    ("import_env", {}, "validation", "imports env.nope, which Towline does not provide"),
    ("flood", {"fuel": 100_000_000}, "output_too_large", "wrote more than 4096 bytes to stdout"),
    ("exit3", {}, "permanent", "exited with status 3"),
])
def test_a_module_past_a_limit_or_outside_wasi_fails_saying_which(
    name: str, request_: dict[str, Any], error_class: str, expected: str
) -> None:
    document, _ = sandboxed_wasm(wat(name), **request_)
    assert document["ok"] is False and document["errorClass"] == error_class, document
    assert expected in document["message"], document


def test_a_module_that_writes_on_past_the_cap_is_stopped_at_once_not_when_its_fuel_runs_out() -> None:
    """Host calls cost no fuel: without the stop, flood.wat spends all 100M units in EFBIG writes (on a busy
    node that outlasted the step's deadline, and the step said "time limit" instead of naming the cap)."""
    failed, fuel_used, output = codehost._run_start(
        {"fuel": 100_000_000, "memoryBytes": 8 << 20, "outputLimit": 4096}, wat("flood"))
    assert output.overflowed and len(output.data) <= 4096, len(output.data)
    assert failed is not None and fuel_used < 1_000_000, (failed, fuel_used)


def test_a_module_gets_no_directory_to_open_and_no_socket_to_use() -> None:
    """wasmcheck lets a module import path_open and sock_* (toolchains link them); the sandbox gives it no
    preopened directory and no socket, so each call answers EBADF (8): there is nothing at fd 3."""
    document, _ = sandboxed_wasm(wat("escape"))
    assert document["ok"] is True, document
    assert json.loads(document["stdout"]) == {"path_open": 8, "sock_accept": 8, "sock_recv": 8}, document


def test_exit_status_75_is_the_protocols_retryable_failure() -> None:
    module = bytes(wasmtime.wat2wasm(
        '(module (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))'
        ' (memory (export "memory") 1) (func (export "_start") (call $exit (i32.const 75))))'))
    document, _ = sandboxed_wasm(module)
    assert document["errorClass"] == "transient", document


@pytest.mark.parametrize(("module", "expected"), [
    ({"configMap": {"name": "m", "key": "k"}, "url": "https://x.example/m.wasm", "sha256": "0" * 64},
     "set exactly one of module.configMap"),
    ({"url": "https://x.example/m.wasm"}, "module.url needs module.sha256"),
    ({"configMap": {"name": "m", "key": "k"}, "sha256": "0" * 64}, "remove sha256"),
    ({"url": "https://x.example/m.wasm", "sha256": "ABC"}, "with.module.sha256"),
])
def test_a_module_source_is_exactly_one_of_a_config_map_key_or_a_pinned_url(
    module: dict[str, Any], expected: str
) -> None:
    problems = validate_inputs("code.wasm", {"module": module})
    assert problems and expected in problems[0], problems


def test_a_config_map_module_is_mounted_as_one_file_and_sizes_the_pod() -> None:
    needs = wasm_pod_needs({"module": {"configMap": {"name": "mods", "key": "enrich.wasm"}}, "memory": "32Mi"})
    assert needs.config_map_file == ("mods", "enrich.wasm") and needs.own_user
    assert needs.memory_limit_bytes == (32 << 20) + code_wasm.RUNNER_SHARE_BYTES


def test_a_missing_config_map_key_names_the_config_map_and_how_to_create_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code_wasm, "CONFIG_MAP_FILE_PATH", str(tmp_path / "module"))
    with pytest.raises(ActionError, match=r"ConfigMap mods has no key enrich\.wasm .* kubectl create configmap mods "
                                          r"--from-file=enrich\.wasm=module\.wasm"):
        run_action("code.wasm", {"module": {"configMap": {"name": "mods", "key": "enrich.wasm"}}}, make_ctx())
    (tmp_path / "module").write_bytes(wat("greet"))
    assert run_action("code.wasm", {"module": {"configMap": {"name": "mods", "key": "enrich.wasm"}}},
                      make_ctx()).output == {"greeting": "hello from wat"}


def test_a_url_module_runs_only_with_the_pinned_digest(http_server: LoopbackHTTPServer) -> None:
    module = wat("echo")
    digest = hashlib.sha256(module).hexdigest()
    http_server.routes["/echo.wasm"] = Reply(200, module)
    http_server.routes["/other.wasm"] = Reply(200, wat("greet"))
    http_server.routes["/gone.wasm"] = Reply(503)
    ok = run_action("code.wasm", {"module": {"url": http_server.url("/echo.wasm"), "sha256": digest},
                                  "inputs": {"n": 1}}, make_ctx(deadline_seconds=30))
    assert ok.output == {"n": 1} and ok.usage is not None and ok.usage["fuel"] > 0
    with pytest.raises(ActionError, match=f"the module's sha256 is [0-9a-f]{{64}}, not the pinned {digest}"):
        run_action("code.wasm", {"module": {"url": http_server.url("/other.wasm"), "sha256": digest}}, make_ctx())
    with pytest.raises(ActionError) as unavailable:
        run_action("code.wasm", {"module": {"url": http_server.url("/gone.wasm"), "sha256": digest}}, make_ctx())
    assert unavailable.value.error_class is ErrorClass.TRANSIENT


def test_a_url_module_is_fetched_only_through_the_steps_guard(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/echo.wasm"] = Reply(200, wat("echo"))
    with pytest.raises(ActionError, match=r"module\.url") as refused:
        run_action("code.wasm", {"module": {"url": http_server.url("/echo.wasm"), "sha256": "0" * 64}},
                   make_ctx(rules=NetworkRules()))
    assert refused.value.error_class is ErrorClass.PERMANENT
    assert http_server.requests == []
