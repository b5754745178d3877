"""How a step pod mounts its credentials: exactly the Secrets the step names, read-only and optional
(a missing one must not leave the pod waiting), and only their names in the environment."""

from __future__ import annotations

import json
from typing import Any

from towline.k8s.objects import CREDENTIALS_DIR, RunRef, StepPodSettings, build_step_job

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")


def pod_spec(credentials: dict[str, str]) -> dict[str, Any]:
    job = build_step_job(
        RUN, job_name="r-1-call-1", step_id="call", attempt=1, action="http.request",
        inputs={"url": "https://example.com"}, credentials=credentials, idempotency_key="k",
        timeout_seconds=60, settings=StepPodSettings(),
    )
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def test_each_named_secret_is_an_optional_read_only_volume_and_nothing_else() -> None:
    spec = pod_spec({"api": "api-token", "crm_main": "crm-api"})
    secrets = {v["name"]: v["secret"] for v in spec["volumes"] if "secret" in v}
    assert secrets == {
        "cred-api": {"secretName": "api-token", "defaultMode": 0o440, "optional": True},
        "cred-crm-main": {"secretName": "crm-api", "defaultMode": 0o440, "optional": True},
    }
    assert all(set(v) <= {"name", "secret", "emptyDir"} for v in spec["volumes"]), "no projected or other source"
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["cred-api"] == {"name": "cred-api", "mountPath": f"{CREDENTIALS_DIR}/api", "readOnly": True}
    assert mounts["cred-crm-main"]["mountPath"] == f"{CREDENTIALS_DIR}/crm_main"
    assert mounts["cred-crm-main"]["readOnly"] is True


def test_a_step_without_credentials_mounts_no_secret() -> None:
    spec = pod_spec({})
    assert not [v for v in spec["volumes"] if "secret" in v]
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert json.loads(env["TOWLINE_CREDENTIAL_SECRETS"]) == {}


def test_the_runner_gets_the_secret_names_and_namespace_as_plain_values() -> None:
    env = pod_spec({"api": "api-token"})["containers"][0]["env"]
    by_name = {e["name"]: e for e in env}
    assert json.loads(by_name["TOWLINE_CREDENTIAL_SECRETS"]["value"]) == {"api": "api-token"}
    assert by_name["TOWLINE_NAMESPACE"]["value"] == "team"
    assert not any("valueFrom" in e for e in env), "no env var reads a Secret"
