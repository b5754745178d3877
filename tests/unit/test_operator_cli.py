"""The `towline` command: the options the chart sets through the environment, and its subcommands."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from towline.cli import main, watch_namespaces_from
from towline.k8s.secrets import remember_key_material


def test_watch_namespaces_are_read_from_the_comma_separated_value() -> None:
    assert watch_namespaces_from("team-a, team-b,") == ["team-a", "team-b"]


def test_no_watch_namespaces_means_every_namespace() -> None:
    assert watch_namespaces_from("") == []
    assert watch_namespaces_from(" , ") == []


def test_connectors_json_prints_the_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["connectors", "--json"]) == 0
    schemas = json.loads(capsys.readouterr().out)
    assert "http.request" in json.dumps(schemas)


def test_connectors_without_options_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["connectors"]) == 0
    assert capsys.readouterr().out.startswith("ACTION")


def test_webhook_without_send_says_how_to_use_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhook", "--scheme", "github"]) == 2
    assert "usage: towline webhook send URL" in capsys.readouterr().err


def test_the_ingress_logs_through_the_redacting_formatter(monkeypatch: pytest.MonkeyPatch) -> None:
    """`towline ingress` configures logging as the operator does: a key it read never reaches a line."""
    served: list[object] = []

    def serve(*args: object) -> int:
        served.append(args)
        return 0

    monkeypatch.setattr("towline.triggers.ingress.server.run_ingress", serve)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        assert main(["ingress", "--log-format", "json"]) == 0
        assert served
        remember_key_material(base64.b64encode(b"whsec_c2VjcmV0LWtleS1ieXRlcw==").decode())
        handler = root.handlers[-1]
        for shown in ("whsec_c2VjcmV0LWtleS1ieXRlcw==", "c2VjcmV0LWtleS1ieXRlcw==", "secret-key-bytes"):
            record = logging.LogRecord("t", logging.INFO, __file__, 1, "echo %s", (shown,), None)
            assert json.loads(handler.format(record))["message"] == "echo [REDACTED]", shown
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.parametrize(("argv", "named"), [
    (["--max-in-flight", "0"], "--max-in-flight"),
    (["--namespace-buffered-bytes", "-5"], "--namespace-buffered-bytes"),
    (["--port", "70000"], "--port"),
    (["--body-timeout", "nan"], "--body-timeout"),
    (["--header-timeout", "soon"], "--header-timeout"),
])
def test_a_bad_ingress_number_is_refused_naming_the_option_without_a_traceback(
        argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["ingress", *argv])
    assert ended.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {named}: give a" in error and repr(argv[1]) in error, error
    assert "Traceback" not in error


def test_a_bad_number_from_the_environment_is_refused_as_the_option_it_sets(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TOWLINE_INGRESS_MAX_IN_FLIGHT", "many")
    with pytest.raises(SystemExit) as ended:
        main(["ingress"])
    assert ended.value.code == 2
    assert "argument --max-in-flight: give a whole number of at least 1, not 'many'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ingress", "--help"])
    assert "$TOWLINE_INGRESS_MAX_IN_FLIGHT" in capsys.readouterr().out
