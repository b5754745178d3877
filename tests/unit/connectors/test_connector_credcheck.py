"""The runner's check that every Secret the step names is mounted with keys, on real directories laid
out as the kubelet lays out Secret volumes (an optional volume of a missing Secret is empty)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from connector_testkit import write_secret
from pydantic import BaseModel

from towline_connectors.models import InputModel
from towline_connectors.redact import Redactor
from towline_connectors.registry import ACTIONS
from towline_connectors.runner import EXIT_PERMANENT, EXIT_USAGE, RunnerSeams, run_step
from towline_connectors.spec import ActionResult, ActionSpec, RetryDefaults

VALUE = "s3cret-VALUE-never-shown"


def seams_recording(calls: list[str]) -> RunnerSeams:
    class NoInput(InputModel):
        pass

    async def run(_model: Any, _ctx: Any) -> ActionResult:
        calls.append("ran")
        return ActionResult(output={"ran": True})

    spec = ActionSpec(
        name="test.fake", summary="records that it ran", input_model=NoInput, output_model=BaseModel, run=run,
        credential=None, mutating=False, idempotency="none", default_retry=RetryDefaults(0, 0, 0, "fixed", ()),
    )
    return RunnerSeams(actions={**ACTIONS, "test.fake": spec})


def run(tmp_path: Path, secrets: dict[str, str], action: str = "test.fake",
        inputs: dict[str, Any] | None = None,
        keys: dict[str, list[str]] | None = None) -> tuple[Any, dict[str, Any], str, list[str]]:
    env = {
        "TOWLINE_ACTION": action,
        "TOWLINE_INPUT": json.dumps(inputs or {}),
        "TOWLINE_CREDENTIALS_DIR": str(tmp_path / "credentials"),
        "TOWLINE_RESULT_PATH": str(tmp_path / "termination-log"),
        "TOWLINE_CREDENTIAL_SECRETS": json.dumps(secrets),
        "TOWLINE_NAMESPACE": "team",
        "TOWLINE_NETWORK": json.dumps({"allowPrivateCidrs": ["127.0.0.0/8"]}),
        **({"TOWLINE_CREDENTIAL_KEYS": json.dumps(keys)} if keys is not None else {}),
    }
    calls: list[str] = []
    log = io.StringIO()
    result = run_step(env, redactor=Redactor(), log=log, seams=seams_recording(calls))
    return result, json.loads(Path(env["TOWLINE_RESULT_PATH"]).read_text()), log.getvalue(), calls


@pytest.fixture
def mounts(tmp_path: Path) -> Path:
    directory = tmp_path / "credentials"
    directory.mkdir()
    return directory


def test_a_missing_secret_ends_the_attempt_before_the_action_naming_it_and_the_fix(
    tmp_path: Path, mounts: Path
) -> None:
    write_secret(mounts, "crm", {"token": VALUE})
    write_secret(mounts, "api", {})  # optional volume, Secret absent: only the kubelet's bookkeeping
    result, document, log, calls = run(tmp_path, {"api": "api-token", "crm": "crm-api"})
    assert calls == [], "the action must not run without its credentials"
    assert (document["ok"], document["errorClass"], document["retryable"]) == (False, "auth", False)
    assert result.exit_code == EXIT_PERMANENT
    assert document["missingSecrets"] == ["api-token"]
    assert "Secret 'api-token' (credential 'api')" in document["message"]
    assert "kubectl create secret generic api-token --from-literal=KEY=VALUE -n team" in document["message"]
    assert "crm-api" not in document["message"]
    assert VALUE not in json.dumps(document) and VALUE not in log
    assert "api-token" in log


def test_an_alias_with_no_mount_at_all_counts_as_missing(tmp_path: Path, mounts: Path) -> None:
    _, document, _, calls = run(tmp_path, {"api": "api-token", "other": "api-token"})
    assert calls == [] and document["missingSecrets"] == ["api-token"]
    assert "(credential 'api', 'other')" in document["message"]


def test_every_secret_present_lets_the_action_run(tmp_path: Path, mounts: Path) -> None:
    write_secret(mounts, "api", {"token": VALUE})
    result, document, _, calls = run(tmp_path, {"api": "api-token"})
    assert calls == ["ran"] and document["ok"] is True and "missingSecrets" not in document
    assert result.ok


def test_a_step_without_credentials_is_not_checked(tmp_path: Path) -> None:
    _, document, _, calls = run(tmp_path, {})
    assert calls == ["ran"] and document["ok"] is True


def test_a_secret_without_the_key_the_step_uses_names_the_key_and_the_secret(
    tmp_path: Path, mounts: Path, http_server: Any
) -> None:
    write_secret(mounts, "api", {"other": VALUE})
    inputs = {"url": http_server.url("/x"), "auth": {"bearer": {"credential": "api", "key": "token"}}}
    _, document, log, _ = run(tmp_path, {"api": "api-token"}, action="http.request", inputs=inputs)
    assert document["errorClass"] == "auth" and "missingSecrets" not in document
    assert "has no key 'token' (keys: other); add that key to Secret 'api-token'" in document["message"]
    assert VALUE not in json.dumps(document) and VALUE not in log
    assert http_server.requests == []


@pytest.mark.parametrize("text", ["not json", "[\"api-token\"]", "{\"api\": 3}", "{\"api\": \"\"}"])
def test_a_malformed_secret_map_is_a_usage_error_naming_the_variable(tmp_path: Path, text: str) -> None:
    result, document, _, calls = run_raw(tmp_path, text)
    assert calls == [] and result.exit_code == EXIT_USAGE
    assert "TOWLINE_CREDENTIAL_SECRETS" in document["message"]


def run_raw(tmp_path: Path, text: str) -> tuple[Any, dict[str, Any], str, list[str]]:
    env = {
        "TOWLINE_ACTION": "test.fake",
        "TOWLINE_CREDENTIALS_DIR": str(tmp_path / "credentials"),
        "TOWLINE_RESULT_PATH": str(tmp_path / "termination-log"),
        "TOWLINE_CREDENTIAL_SECRETS": text,
    }
    calls: list[str] = []
    result = run_step(env, redactor=Redactor(), log=io.StringIO(), seams=seams_recording(calls))
    return result, json.loads(Path(env["TOWLINE_RESULT_PATH"]).read_text()), "", calls


def test_a_key_the_step_reads_that_its_secret_lacks_ends_the_attempt_naming_secret_and_key(
    tmp_path: Path, mounts: Path
) -> None:
    """The pod mounts only the keys the step reads; the kubelet leaves out one the Secret lacks (optional volume)."""
    write_secret(mounts, "svc", {"username": VALUE})
    env_keys = {"svc": ["password", "username"]}
    _, document, log, calls = run(tmp_path, {"svc": "svc-login"}, keys=env_keys)
    assert calls == [] and (document["errorClass"], document["retryable"]) == ("auth", False)
    assert document["missingSecrets"] == ["svc-login"]
    assert "Secret 'svc-login' (credential 'svc') has no key 'password', which the step reads" in document["message"]
    assert """kubectl patch secret svc-login -n team --type merge -p '{"stringData":{"password":"VALUE"}}'""" in \
        document["message"]
    assert VALUE not in json.dumps(document) and VALUE not in log


def test_a_secret_with_none_of_the_keys_the_step_reads_names_them_in_the_fix(tmp_path: Path, mounts: Path) -> None:
    write_secret(mounts, "crm", {})
    _, document, _, calls = run(tmp_path, {"crm": "crm-api"}, keys={"crm": ["token"]})
    assert calls == [] and document["missingSecrets"] == ["crm-api"]
    assert "has none of the keys the step reads (token)" in document["message"]
    assert "kubectl create secret generic crm-api --from-literal=token=VALUE -n team" in document["message"]


def test_every_key_the_step_reads_present_lets_the_action_run(tmp_path: Path, mounts: Path) -> None:
    write_secret(mounts, "svc", {"username": "u", "password": VALUE})
    _, document, _, calls = run(tmp_path, {"svc": "svc-login"}, keys={"svc": ["password", "username"]})
    assert calls == ["ran"] and document["ok"] is True
