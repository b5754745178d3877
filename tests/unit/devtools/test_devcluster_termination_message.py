"""Termination messages are cut exactly as the kubelet cuts them."""

from __future__ import annotations

from towline_dev.podspec import (
    MAX_TERMINATION_MESSAGE_BYTES,
    MAX_TERMINATION_MESSAGE_LOG_BYTES,
    log_tail_message,
    termination_message,
)


def message(file_data: bytes | None, log: bytes = b"", policy: str = "File", exit_code: int = 0,
            reason: str = "Completed") -> str:
    return termination_message(file_data=file_data, log=log, policy=policy, exit_code=exit_code, reason=reason)


def test_file_content_is_the_message() -> None:
    assert message(b'{"ok": true}') == '{"ok": true}'


def test_an_oversized_file_keeps_its_last_4096_bytes() -> None:
    data = b"a" * 10 + b"b" * MAX_TERMINATION_MESSAGE_BYTES
    assert message(data) == "b" * MAX_TERMINATION_MESSAGE_BYTES


def test_no_file_and_file_policy_gives_no_message_even_on_failure() -> None:
    assert message(None, log=b"boom\n", exit_code=1, reason="Error") == ""


def test_fallback_to_logs_uses_the_log_tail_when_the_file_is_empty_and_the_container_failed() -> None:
    assert message(b"", log=b"one\ntwo\n", policy="FallbackToLogsOnError", exit_code=2, reason="Error") == "one\ntwo\n"


def test_fallback_to_logs_is_not_used_on_success() -> None:
    assert message(b"", log=b"fine\n", policy="FallbackToLogsOnError", exit_code=0) == ""


def test_fallback_to_logs_is_not_used_when_the_container_could_not_run() -> None:
    assert message(None, log=b"x\n", policy="FallbackToLogsOnError", exit_code=128, reason="ContainerCannotRun") == ""


def test_a_written_file_wins_over_the_log_fallback() -> None:
    assert message(b"why", log=b"noise\n", policy="FallbackToLogsOnError", exit_code=1, reason="Error") == "why"


def test_log_fallback_keeps_the_last_80_lines() -> None:
    log = b"".join(f"{i}\n".encode() for i in range(100))
    assert log_tail_message(log) == "".join(f"{i}\n" for i in range(20, 100))


def test_log_fallback_keeps_the_last_2048_bytes_of_those_lines() -> None:
    log = b"".join(b"%02d" % i + b"x" * 97 + b"\n" for i in range(50))
    tail = log_tail_message(log)
    assert len(tail.encode()) == MAX_TERMINATION_MESSAGE_LOG_BYTES
    assert tail.endswith("49" + "x" * 97 + "\n")
