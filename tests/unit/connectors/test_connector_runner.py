"""The step runner: env contract, result document, exit codes, deadline and redaction."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from connector_testkit import LoopbackHTTPServer, RecordedRequest, Reply, write_secret
from pydantic import BaseModel

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.models import CredentialRef, InputModel
from towline_connectors.redact import Redactor
from towline_connectors.registry import ACTIONS
from towline_connectors.runner import (
    EXIT_OK,
    EXIT_PERMANENT,
    EXIT_RETRYABLE,
    EXIT_USAGE,
    RESULT_LIMIT_BYTES,
    RunnerSeams,
    StepResult,
    read_config,
    render_result,
    run_step,
)
from towline_connectors.spec import ActionResult, ActionSpec, RetryDefaults

TOKEN = 'tok-"Zq9\\x7Lm-SECRET'
LOOPBACK = json.dumps({"allowPrivateCidrs": ["127.0.0.0/8"]})
DOCUMENT_KEYS = {"ok", "output", "errorClass", "message", "retryable", "retryAfterSeconds", "usage"}


def _env(tmp_path: Path, action: str, inputs: dict[str, Any], **extra: str) -> dict[str, str]:
    env = {
        "TOWLINE_ACTION": action,
        "TOWLINE_INPUT": json.dumps(inputs),
        "TOWLINE_CREDENTIALS_DIR": str(tmp_path / "credentials"),
        "TOWLINE_RESULT_PATH": str(tmp_path / "termination-log"),
        "TOWLINE_IDEMPOTENCY_KEY": "renewal-watch-uid-create_tasks-1",
        "TOWLINE_DEADLINE_SECONDS": "10",
        "TOWLINE_NETWORK": LOOPBACK,
    }
    env.update(extra)
    return env


def _run(env: dict[str, str], seams: RunnerSeams | None = None) -> tuple[StepResult, dict[str, Any], str]:
    log = io.StringIO()
    result = run_step(env, redactor=Redactor(), log=log, seams=seams)
    document = json.loads(Path(env["TOWLINE_RESULT_PATH"]).read_text())
    return result, document, log.getvalue()


def _fake_action(run: Any, *, mutating: bool = False) -> dict[str, ActionSpec]:
    class NoInput(InputModel):
        pass

    spec = ActionSpec(
        name="test.fake",
        summary="test double",
        input_model=NoInput,
        output_model=BaseModel,
        run=run,
        credential=None,
        mutating=mutating,
        idempotency="none",
        default_retry=RetryDefaults(0, 0, 0, "fixed", ()),
    )
    return {**ACTIONS, "test.fake": spec}


def test_success_writes_one_document_with_the_contract_keys(tmp_path: Path) -> None:
    env = _env(tmp_path, "data.transform", {"data": {"n": 2}, "fields": {"double": "data.n * 2"}})
    result, document, _ = _run(env)
    assert document == {
        "ok": True,
        "output": {"double": 4},
        "errorClass": None,
        "message": None,
        "retryable": False,
        "retryAfterSeconds": None,
        "usage": None,
    }
    assert result.exit_code == EXIT_OK


@pytest.mark.parametrize(
    ("error_class", "exit_code"),
    [
        (ErrorClass.VALIDATION, EXIT_USAGE),
        (ErrorClass.TRANSIENT, EXIT_RETRYABLE),
        (ErrorClass.RATE_LIMIT, EXIT_RETRYABLE),
        (ErrorClass.TIMEOUT, EXIT_RETRYABLE),
        (ErrorClass.AUTH, EXIT_PERMANENT),
        (ErrorClass.PERMANENT, EXIT_PERMANENT),
        (ErrorClass.UNKNOWN_SIDE_EFFECT, EXIT_PERMANENT),
        (ErrorClass.OUTPUT_TOO_LARGE, EXIT_PERMANENT),
    ],
)
def test_exit_code_tells_retryable_from_permanent(error_class: ErrorClass, exit_code: int) -> None:
    assert StepResult.failure(ActionError(error_class, "x")).exit_code == exit_code


def test_unknown_action_is_a_usage_error(tmp_path: Path) -> None:
    result, document, _ = _run(_env(tmp_path, "ftp.upload", {}))
    assert (result.exit_code, document["errorClass"]) == (EXIT_USAGE, "validation")
    assert "does not exist" in document["message"]


def test_input_that_is_not_a_json_object_is_a_usage_error(tmp_path: Path) -> None:
    env = _env(tmp_path, "data.transform", {})
    env["TOWLINE_INPUT"] = "[1, 2]"
    result, document, _ = _run(env)
    assert result.exit_code == EXIT_USAGE
    assert document["message"] == "TOWLINE_INPUT must be a JSON object (the step's `with:`)"


def test_invalid_inputs_name_the_field(tmp_path: Path) -> None:
    result, document, _ = _run(_env(tmp_path, "http.request", {"url": "https://a.example.com", "methd": "GET"}))
    assert result.exit_code == EXIT_USAGE
    assert document["message"].startswith("with.methd: unknown field 'methd'")


def test_output_over_the_limit_fails_with_size_limit_and_a_hint(
    tmp_path: Path, http_server: LoopbackHTTPServer
) -> None:
    http_server.routes["/big"] = Reply(200, {"items": ["x" * 100] * 60})
    result, document, _ = _run(_env(tmp_path, "http.request", {"url": http_server.url("/big")}))
    raw = Path(tmp_path / "termination-log").read_bytes()
    assert len(raw) <= RESULT_LIMIT_BYTES
    assert (document["errorClass"], document["retryable"], result.exit_code) == ("output_too_large", False, 1)
    assert f"over the {RESULT_LIMIT_BYTES}-byte termination-message limit" in document["message"]
    assert "with.select" in document["message"]


def test_huge_failure_message_is_trimmed_to_fit() -> None:
    result, text = render_result(StepResult.failure(ActionError(ErrorClass.PERMANENT, "e" * 20000)), Redactor(), "")
    assert len(text.encode()) <= RESULT_LIMIT_BYTES
    assert result.error_class is ErrorClass.PERMANENT


def test_credentials_come_from_the_secret_volume_layout(tmp_path: Path, http_server: LoopbackHTTPServer) -> None:
    write_secret(tmp_path / "credentials", "crm", {"token": "tok-abc\n"})
    http_server.routes["/"] = Reply(200)
    inputs = {"url": http_server.url("/"), "auth": {"bearer": {"credential": "crm", "key": "token"}}}
    result, _, _ = _run(_env(tmp_path, "http.request", inputs))
    assert result.ok
    assert http_server.requests[0].headers["authorization"] == "Bearer tok-abc"


def test_loopback_is_refused_unless_the_network_env_opts_in(tmp_path: Path, http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    env = _env(tmp_path, "http.request", {"url": http_server.url("/")})
    del env["TOWLINE_NETWORK"]
    result, document, _ = _run(env)
    assert (result.exit_code, document["errorClass"]) == (EXIT_PERMANENT, "permanent")
    assert "loopback address" in document["message"]
    assert http_server.requests == []


def test_rate_limit_result_carries_retry_after(tmp_path: Path, http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(429, headers={"Retry-After": "12"})
    result, document, _ = _run(_env(tmp_path, "http.request", {"url": http_server.url("/")}))
    assert (document["errorClass"], document["retryable"], document["retryAfterSeconds"]) == ("rate_limit", True, 12.0)
    assert result.exit_code == EXIT_RETRYABLE


def test_ai_usage_is_reported_at_the_top_level(tmp_path: Path, http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/chat/completions"] = Reply(
        200,
        {
            "model": "m-2026",
            "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        },
    )
    inputs = {"baseUrl": http_server.url("/v1"), "model": "m", "messages": [{"role": "user", "content": "hi"}]}
    _, document, _ = _run(_env(tmp_path, "ai.chat", inputs))
    assert document["usage"]["modelVersion"] == "m-2026"
    assert document["usage"]["totalTokens"] == 4


def test_deadline_before_anything_was_sent_is_a_timeout(tmp_path: Path) -> None:
    async def stall(inputs: Any, ctx: ActionContext) -> ActionResult:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    env = _env(tmp_path, "test.fake", {}, TOWLINE_DEADLINE_SECONDS="0.5")
    result, document, _ = _run(env, RunnerSeams(actions=_fake_action(stall, mutating=True)))
    assert (document["errorClass"], result.exit_code) == ("timeout", EXIT_RETRYABLE)


def test_deadline_after_a_mutating_request_was_sent_is_an_unknown_side_effect(tmp_path: Path) -> None:
    async def send_then_stall(inputs: Any, ctx: ActionContext) -> ActionResult:
        ctx.side_effects.mark_sent()
        await asyncio.sleep(30)
        raise AssertionError("unreachable")

    env = _env(tmp_path, "test.fake", {}, TOWLINE_DEADLINE_SECONDS="0.5")
    result, document, _ = _run(env, RunnerSeams(actions=_fake_action(send_then_stall, mutating=True)))
    assert (document["errorClass"], result.exit_code) == ("unknown_side_effect", EXIT_PERMANENT)


def test_post_cut_off_by_the_deadline_is_an_unknown_side_effect(
    tmp_path: Path, http_server: LoopbackHTTPServer
) -> None:
    http_server.routes["/slow"] = Reply(200, delay=3)
    inputs = {"url": http_server.url("/slow"), "method": "POST", "json": {}}
    _, document, _ = _run(_env(tmp_path, "http.request", inputs, TOWLINE_DEADLINE_SECONDS="1"))
    assert document["errorClass"] == "unknown_side_effect"
    assert len(http_server.requests) == 1


def test_secret_in_an_exception_never_reaches_log_or_result(tmp_path: Path) -> None:
    write_secret(tmp_path / "credentials", "crm", {"token": TOKEN})

    async def leaky(inputs: Any, ctx: ActionContext) -> ActionResult:
        token = ctx.secret(CredentialRef(credential="crm", key="token"))
        raise RuntimeError(f"upstream rejected {token!r} (raw: {token})")

    result, document, log = _run(_env(tmp_path, "test.fake", {}), RunnerSeams(actions=_fake_action(leaky)))
    raw = (tmp_path / "termination-log").read_text()
    assert "Traceback" in log
    assert "[REDACTED]" in log
    assert "[REDACTED]" in document["message"]
    for text in (log, raw, document["message"]):
        assert "Zq9" not in text
    assert result.error_class is ErrorClass.PERMANENT


def test_secret_echoed_back_by_a_server_is_redacted_from_the_output(
    tmp_path: Path, http_server: LoopbackHTTPServer
) -> None:
    write_secret(tmp_path / "credentials", "crm", {"token": "echo-me-7781"})

    def echo(request: RecordedRequest) -> Reply:
        return Reply(200, {"youSent": request.headers["authorization"]})

    http_server.routes["/"] = echo
    inputs = {"url": http_server.url("/"), "auth": {"bearer": {"credential": "crm", "key": "token"}}}
    _, document, _ = _run(_env(tmp_path, "http.request", inputs))
    assert document["output"]["body"] == {"youSent": "Bearer [REDACTED]"}


# --- as the container command --------------------------------------------


def _subprocess_env(env: dict[str, str]) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "SYSTEMROOT")}
    return {**keep, **env}


def test_runner_module_works_as_a_container_command(tmp_path: Path, http_server: LoopbackHTTPServer) -> None:
    write_secret(tmp_path / "credentials", "tasks", {"token": "tasks-token-1"})
    http_server.routes["/api/bulk"] = Reply(201, {"created": 3})
    inputs = {
        "url": http_server.url("/api/bulk"),
        "method": "POST",
        "json": [{"account": "a1"}],
        "auth": {"bearer": {"credential": "tasks", "key": "token"}},
    }
    env = _subprocess_env(_env(tmp_path, "http.request", inputs))
    completed = subprocess.run(
        [sys.executable, "-m", "towline_connectors.runner"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    document = json.loads((tmp_path / "termination-log").read_text())
    assert completed.returncode == EXIT_OK, completed.stderr
    assert document["output"]["body"] == {"created": 3}
    assert http_server.requests[0].headers["idempotency-key"] == "renewal-watch-uid-create_tasks-1"
    assert completed.stdout == ""


def test_runner_process_never_emits_a_credential_even_from_a_crashing_action(tmp_path: Path) -> None:
    write_secret(tmp_path / "credentials", "crm", {"token": TOKEN})
    script = textwrap.dedent(
        """
        import sys
        from pydantic import BaseModel
        import towline_connectors.runner as runner
        from towline_connectors.models import CredentialRef, InputModel
        from towline_connectors.spec import ActionSpec, RetryDefaults

        class NoInput(InputModel):
            pass

        async def leaky(inputs, ctx):
            token = ctx.secret(CredentialRef(credential="crm", key="token"))
            print("debug: using token", token)
            print("debug: repr", repr(token), file=sys.stderr)
            raise ValueError("server said no to " + repr(token))

        spec = ActionSpec("test.leaky", "leaks", NoInput, BaseModel, leaky, None, False, "none",
                          RetryDefaults(0, 0, 0, "fixed", ()))
        runner.ACTIONS = {"test.leaky": spec}
        sys.exit(runner.main())
        """
    )
    env = _subprocess_env(_env(tmp_path, "test.leaky", {}))
    completed = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    result = (tmp_path / "termination-log").read_text()
    assert completed.returncode == EXIT_PERMANENT
    assert "debug: using token [REDACTED]" in completed.stdout
    assert "Traceback" in completed.stderr
    for text in (completed.stdout, completed.stderr, result):
        assert "Zq9" not in text


def test_sigterm_from_the_kubelet_still_produces_a_result(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        from pydantic import BaseModel
        import towline_connectors.runner as runner
        from towline_connectors.models import InputModel
        from towline_connectors.spec import ActionSpec, RetryDefaults

        class NoInput(InputModel):
            pass

        async def stall(inputs, ctx):
            await asyncio.sleep(60)

        spec = ActionSpec("test.stall", "stalls", NoInput, BaseModel, stall, None, False, "none",
                          RetryDefaults(0, 0, 0, "fixed", ()))
        runner.ACTIONS = {"test.stall": spec}
        sys.exit(runner.main())
        """
    )
    env = _subprocess_env(_env(tmp_path, "test.stall", {}, TOWLINE_DEADLINE_SECONDS="60"))
    process = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    assert process.stderr is not None
    while "running test.stall" not in process.stderr.readline():
        pass
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == EXIT_RETRYABLE
    process.stderr.close()
    document = json.loads((tmp_path / "termination-log").read_text())
    assert document["errorClass"] == "timeout"
    assert "terminated" in document["message"]


def test_time_the_pod_spent_starting_comes_off_the_budget_by_the_absolute_deadline() -> None:
    """The kubelet counts the Job's deadline from its start; the runner's clock starts later on a busy node."""
    environ = {"TOWLINE_ACTION": "data.transform", "TOWLINE_INPUT": '{"fields": {"a": "1"}}',
               "TOWLINE_DEADLINE_SECONDS": "55", "TOWLINE_DEADLINE_AT": "2026-12-02T10:00:55Z"}
    at_ten = 1_796_205_600.0  # 2026-12-02T10:00:00Z
    assert read_config(environ, ACTIONS, now=at_ten).deadline_seconds == 55
    assert read_config(environ, ACTIONS, now=at_ten + 20).deadline_seconds == 35
    assert read_config(environ, ACTIONS, now=at_ten + 90).deadline_seconds == 0.1
    assert read_config({**environ, "TOWLINE_DEADLINE_AT": ""}, ACTIONS, now=at_ten + 90).deadline_seconds == 55
    with pytest.raises(ActionError, match="TOWLINE_DEADLINE_AT must be an RFC 3339 time"):
        read_config({**environ, "TOWLINE_DEADLINE_AT": "soon"}, ACTIONS, now=at_ten)
