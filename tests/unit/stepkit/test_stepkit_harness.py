"""The local harness: a pod-like directory, the protocol's environment, the result read as the operator reads it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from stepkit_testkit import GREETER_DIR

from towline_step.harness import main, python_step_command, run_locally
from towline_step.protocol import EXIT_RETRYABLE, ErrorClass

# A step written by hand in another language: POSIX shell, no SDK, only the protocol.
SHELL_STEP = r"""
format='{"ok":true,"output":{"inputs":%s,"key":"%s","type":"%s","hosts":%s,'
format="$format"'"deadline":"%s","version":"%s","token":"%s"}}'
printf "$format" \
  "$(cat "$TOWLINE_INPUTS_PATH")" "$TOWLINE_IDEMPOTENCY_KEY" "$TOWLINE_STEP_TYPE" "$TOWLINE_ALLOW_HOSTS" \
  "$TOWLINE_DEADLINE_SECONDS" "$TOWLINE_PROTOCOL_VERSION" \
  "$(test -f "$TOWLINE_CREDENTIALS_DIR/api/token" && echo present || echo absent)" > "$TOWLINE_RESULT_PATH"
"""


def shell(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def test_a_command_in_any_language_gets_the_protocols_files_and_environment() -> None:
    report = run_locally(shell(SHELL_STEP), inputs={"name": "Ada"}, credentials={("api", "token"): b"t-1"},
                         allow_hosts=["api.example.test"], idempotency_key="key-7", deadline_seconds=30,
                         step_type="steptype/hand-written")
    assert (report.exit_code, report.notes, report.succeeded) == (0, [], True)
    assert report.result.output == {"inputs": {"name": "Ada"}, "key": "key-7", "type": "steptype/hand-written",
                                    "hosts": ["api.example.test"], "deadline": "30", "version": "1",
                                    "token": "present"}


def test_a_decorated_function_runs_through_its_main_in_a_subprocess() -> None:
    report = run_locally(python_step_command("greeter:greet"), inputs={"name": "Ada"}, idempotency_key="k-1",
                         cwd=GREETER_DIR)
    assert report.succeeded
    assert report.result.output == {"greeting": "Hello, Ada!", "idempotencyKey": "k-1", "hadToken": False,
                                    "connected": None, "connectError": None}
    assert "step succeeded" in report.logs


def test_a_failed_step_is_reported_with_its_class_and_the_harness_exits_with_its_code(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(GREETER_DIR)
    assert main(["greeter:greet", "--with", '{"name": "Ada", "fail": "transient"}']) == EXIT_RETRYABLE
    report = json.loads(capsys.readouterr().out)
    assert report["exitCode"] == EXIT_RETRYABLE
    assert (report["result"]["errorClass"], report["result"]["retryable"]) == ("transient", True)


def test_no_result_document_is_judged_by_the_exit_code_alone() -> None:
    retryable = run_locally(shell("exit 75"), inputs={})
    assert (retryable.result.error_class, retryable.result.retryable) == (ErrorClass.TRANSIENT, True)
    assert "wrote no result document" in retryable.notes[0]
    crashed = run_locally(shell("exit 3"), inputs={})
    assert crashed.result.error_class is ErrorClass.PERMANENT and not crashed.succeeded


def test_a_hostile_document_is_refused_as_the_operator_would() -> None:
    report = run_locally(shell("""printf '{"ok":"true"}' > "$TOWLINE_RESULT_PATH\""""), inputs={})
    assert not report.succeeded
    assert report.result.error_class is ErrorClass.PERMANENT
    assert "'ok' must be true or false, not a string" in (report.result.message or "")


def test_a_document_over_the_limit_is_refused() -> None:
    script = """printf '{"ok":true,"output":"%05000d"}' 0 > "$TOWLINE_RESULT_PATH\""""
    report = run_locally(shell(script), inputs={})
    assert report.result_bytes > 4096
    assert "over the 4096-byte limit" in (report.result.message or "")


def test_text_that_is_not_json_is_reported_as_such() -> None:
    report = run_locally(shell('echo "it broke" > "$TOWLINE_RESULT_PATH"'), inputs={})
    assert not report.succeeded and "not JSON" in report.notes[0]


def test_an_exit_code_that_contradicts_the_document_is_noted() -> None:
    report = run_locally(shell("""printf '{"ok":true}' > "$TOWLINE_RESULT_PATH"; exit 1"""), inputs={})
    assert report.result.ok and not report.succeeded
    assert "exit code 1 does not match the result document" in report.notes[0]


def test_a_credential_value_in_the_logs_or_result_is_noted() -> None:
    script = """echo "token is $(cat "$TOWLINE_CREDENTIALS_DIR/api/token")"
printf '{"ok":true,"output":"%s"}' "$(cat "$TOWLINE_CREDENTIALS_DIR/api/token")" > "$TOWLINE_RESULT_PATH\""""
    report = run_locally(shell(script), inputs={}, credentials={("api", "token"): b"leaky-value-123"})
    assert report.notes == ["the value of credential api/token appears in the step's logs",
                            "the value of credential api/token appears in the result document"]
    assert not report.succeeded


def test_an_sdk_step_keeps_the_value_out_of_its_logs() -> None:
    report = run_locally(python_step_command("greeter:greet"), inputs={"name": "Ada"}, cwd=GREETER_DIR,
                         credentials={("api", "token"): b"sdk-secret-456"})
    assert report.succeeded and report.result.output["hadToken"] is True  # type: ignore[index]


def test_a_step_past_its_deadline_gets_sigterm_then_is_judged_without_a_result() -> None:
    report = run_locally([sys.executable, "-c", "import threading; threading.Event().wait(30)"], inputs={},
                         deadline_seconds=0.2)
    assert report.exit_code < 0
    assert "past its 0.2s deadline and was sent SIGTERM" in report.notes[0]
    assert report.result.error_class is ErrorClass.PERMANENT


def test_a_command_that_cannot_start_is_reported() -> None:
    report = run_locally(["/nonexistent/step-binary"], inputs={})
    assert report.exit_code == 127 and "could not start" in report.notes[0]


def test_inputs_merge_the_file_then_with(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "inputs.json").write_text('{"name": "from file", "extra": 1}')
    code = main(["--with-file", str(tmp_path / "inputs.json"), "--with", '{"name": "Ada"}',
                 "--command", "/bin/sh", "-c", """printf '{"ok":true,"output":%s}' "$(cat "$TOWLINE_INPUTS_PATH")" \
> "$TOWLINE_RESULT_PATH\""""])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["result"]["output"] == {"name": "Ada", "extra": 1}


def test_a_credential_value_can_come_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "token").write_text("from-a-file")
    script = """printf '{"ok":true,"output":"%s"}' "$(cat "$TOWLINE_CREDENTIALS_DIR/api/token" | wc -c)" \
> "$TOWLINE_RESULT_PATH\""""
    assert main(["--credential", f"api/token=@{tmp_path / 'token'}", "--command", "/bin/sh", "-c", script]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["output"].strip() == "11"


@pytest.mark.parametrize("argv", [
    [],
    ["greeter:greet", "--command", "true"],
    ["greeter:greet", "--with", "[1]"],
    ["greeter:greet", "--with", "{not json"],
    ["greeter:greet", "--credential", "API/token=x"],
    ["greeter:greet", "--credential", "api/../x=y"],
    ["greeter:greet", "--credential", "api/token"],
    ["greeter:greet", "--deadline", "0"],
])
def test_a_usage_mistake_is_refused_before_anything_runs(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert capsys.readouterr().out == ""


def test_the_help_says_what_is_not_emulated(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text: Any = capsys.readouterr().out
    for limit in ("NetworkPolicy", "egress isolation", "read-only root filesystem", "uid 65532"):
        assert limit in help_text


def test_a_step_whose_module_cannot_be_imported_still_leaves_a_result_naming_why(tmp_path: Path) -> None:
    (tmp_path / "broken_step.py").write_text("raise ImportError('needs a library the image lacks')\n")
    report = run_locally(python_step_command("broken_step:run"), inputs={}, cwd=tmp_path)
    assert (report.exit_code, report.result.error_class) == (1, ErrorClass.PERMANENT)
    assert "cannot load 'broken_step:run': ImportError: needs a library the image lacks" in (
        report.result.message or "")
    assert report.notes == []
