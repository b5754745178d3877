"""The step executor survives an expired watch (410 Gone) by listing again."""

from __future__ import annotations

from pathlib import Path

from kubernetes.client.exceptions import ApiException

from towline_dev.kubeconfig import build_kubeconfig, write_kubeconfig
from towline_dev.stepexecutor import StepExecutor


def executor(tmp_path: Path) -> StepExecutor:
    document = build_kubeconfig(server="https://127.0.0.1:1", ca_pem=b"unused", tokens={"me": "t"},
                                users=("me",), current="me")
    return StepExecutor(write_kubeconfig(tmp_path / "kubeconfig", document), tmp_path / "work")


def test_an_expired_watch_is_followed_by_a_fresh_list(tmp_path: Path) -> None:
    subject = executor(tmp_path)
    calls: list[str] = []

    def relist() -> str:
        calls.append("list")
        return str(len(calls))

    def watch_from(version: str) -> str:
        calls.append(f"watch@{version}")
        if len(calls) == 2:
            raise ApiException(status=410, reason="Expired")
        subject.request_stop()
        return version

    subject._relist = relist  # type: ignore[method-assign]
    subject._watch_from = watch_from  # type: ignore[method-assign]
    subject._watch_loop()

    assert calls == ["list", "watch@1", "list", "watch@3"]
