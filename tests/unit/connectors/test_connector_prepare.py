"""`runner --prepare`, a user step type's init container: Secrets there, isolation proven, then the inputs written."""

from __future__ import annotations

import io
import json
from pathlib import Path

from towline_connectors.isolation import IsolationReport, ProbeOutcome, ProbeTarget
from towline_connectors.prepare import run_prepare
from towline_connectors.wire import EGRESS_NOT_ISOLATED_MESSAGE


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "credentials").mkdir(exist_ok=True)
    return {
        "TOWLINE_INPUT": '{"replicas":2,"service":"api"}',
        "TOWLINE_INPUTS_PATH": str(tmp_path / "inputs.json"),
        "TOWLINE_RESULT_PATH": str(tmp_path / "result"),
        "TOWLINE_CREDENTIALS_DIR": str(tmp_path / "credentials"),
        "TOWLINE_DEADLINE_SECONDS": "60",
        "TOWLINE_ISOLATION_PROBE": "10.96.0.1:443",
        "TOWLINE_NAMESPACE": "team",
        **extra,
    }


def isolated(outcome: ProbeOutcome) -> object:
    probes: list[ProbeTarget] = []

    def check(target: ProbeTarget, budget: float) -> IsolationReport:
        probes.append(target)
        return IsolationReport(outcome.isolated, 3, 0.2, outcome)

    check.probes = probes  # type: ignore[attr-defined]
    return check


def test_inputs_are_written_only_once_isolation_is_proven(tmp_path: Path) -> None:
    check = isolated(ProbeOutcome.REFUSED)
    code = run_prepare(environment(tmp_path), log=io.StringIO(), isolation=check)  # type: ignore[arg-type]
    assert code == 0
    assert json.loads((tmp_path / "inputs.json").read_text()) == {"replicas": 2, "service": "api"}
    assert check.probes == [ProbeTarget("10.96.0.1", 443)]  # type: ignore[attr-defined]
    assert not (tmp_path / "result").exists(), "success leaves the result to the user's container"


def test_a_pod_that_is_not_isolated_ends_the_attempt_before_the_user_code(tmp_path: Path) -> None:
    code = run_prepare(environment(tmp_path), log=io.StringIO(),
                       isolation=isolated(ProbeOutcome.CONNECTED))  # type: ignore[arg-type]
    assert code == 75
    assert not (tmp_path / "inputs.json").exists()
    document = json.loads((tmp_path / "result").read_text())
    assert (document["ok"], document["errorClass"], document["message"]) == (
        False, "transient", EGRESS_NOT_ISOLATED_MESSAGE)


def test_a_missing_secret_is_an_auth_failure_naming_it(tmp_path: Path) -> None:
    env = environment(tmp_path, TOWLINE_CREDENTIAL_SECRETS='{"api":"deploy-token"}',
                      TOWLINE_CREDENTIAL_KEYS='{"api":["token"]}')
    code = run_prepare(env, log=io.StringIO(), isolation=isolated(ProbeOutcome.REFUSED))  # type: ignore[arg-type]
    document = json.loads((tmp_path / "result").read_text())
    assert code == 1
    assert (document["errorClass"], document["missingSecrets"]) == ("auth", ["deploy-token"])
    assert not (tmp_path / "inputs.json").exists()


def test_broken_settings_are_a_validation_failure(tmp_path: Path) -> None:
    code = run_prepare(environment(tmp_path, TOWLINE_INPUT="[1]"), log=io.StringIO(),
                       isolation=isolated(ProbeOutcome.REFUSED))  # type: ignore[arg-type]
    assert code == 2
    assert json.loads((tmp_path / "result").read_text())["errorClass"] == "validation"
