"""The Python example step type: what the integration tests rely on it to report, checked without a cluster."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from stepkit_testkit import GREETER_DIR, StepPod

from towline_step.harness import run_locally
from towline_step.protocol import EXIT_OK, ErrorClass, exit_code_for


@pytest.fixture
def greeter(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(GREETER_DIR))
    import greeter  # noqa: PLC0415  # the example is importable from its own directory only

    return greeter


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


def test_it_greets_and_reports_the_idempotency_key_and_that_no_token_was_bound(greeter: Any, pod: StepPod) -> None:
    assert greeter.greet.main(pod.given({"name": "Ada"}).env) == EXIT_OK
    assert pod.read().output == {"greeting": "Hello, Ada!", "idempotencyKey": "run-uid-step-1", "hadToken": False,
                                 "connected": None, "connectError": None}


def test_it_reports_a_bound_token_without_its_value(greeter: Any, pod: StepPod,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pod.given({"name": "Ada"}).credential("api", "token", "greeter-token-value")
    assert greeter.greet.main(pod.env) == EXIT_OK
    assert pod.read().output["hadToken"] is True
    captured = capsys.readouterr()
    assert "greeter-token-value" not in pod.raw_result() + captured.out + captured.err


@pytest.mark.parametrize(("fail", "error_class"), [
    ("transient", ErrorClass.TRANSIENT),
    ("permanent", ErrorClass.PERMANENT),
    ("rate_limit", ErrorClass.RATE_LIMIT),
    ("auth", ErrorClass.AUTH),
    ("crash", ErrorClass.PERMANENT),
    ("oversize", ErrorClass.OUTPUT_TOO_LARGE),
])
def test_each_failure_mode_fails_with_its_class_and_exit_code(
    greeter: Any, pod: StepPod, fail: str, error_class: ErrorClass
) -> None:
    assert greeter.greet.main(pod.given({"name": "Ada", "fail": fail}).env) == exit_code_for(error_class)
    assert pod.read().error_class is error_class


def test_a_rate_limit_asks_for_five_seconds(greeter: Any, pod: StepPod) -> None:
    greeter.greet.main(pod.given({"name": "Ada", "fail": "rate_limit"}).env)
    assert pod.read().retry_after_seconds == 5


def test_connect_reports_a_raw_tcp_connection_that_succeeded(greeter: Any, pod: StepPod,
                                                             listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert greeter.greet.main(pod.given({"name": "Ada", "connect": f"127.0.0.1:{port}"}).env) == EXIT_OK
    assert (pod.read().output["connected"], pod.read().output["connectError"]) == (True, None)


def test_connect_reports_a_refused_connection_as_data_not_a_failure(greeter: Any, pod: StepPod) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    assert greeter.greet.main(pod.given({"name": "Ada", "connect": f"127.0.0.1:{port}"}).env) == EXIT_OK
    output = pod.read().output
    assert output["connected"] is False and output["connectError"].startswith("ConnectionRefusedError")


def test_a_bad_connect_target_is_a_validation_failure(greeter: Any, pod: StepPod) -> None:
    assert greeter.greet.main(pod.given({"name": "Ada", "connect": "no port here"}).env) == 2
    assert "with.connect" in (pod.read().message or "")


@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "greeter"],
    [sys.executable, str(GREETER_DIR / "greeter.py")],
])
def test_it_runs_as_a_module_or_as_a_script(command: list[str]) -> None:
    report = run_locally(command, inputs={"name": "Ada"}, idempotency_key="k-2", cwd=GREETER_DIR)
    assert report.succeeded and report.result.output["idempotencyKey"] == "k-2"  # type: ignore[index]
