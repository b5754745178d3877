"""How a step pod mounts its credentials: only the keys the step reads (Secret volume `items`), read-only
and optional (a missing Secret or key must not leave the pod waiting), and only names in the environment."""

from __future__ import annotations

import json
from typing import Any

import pytest

from towline.k8s.mounts import credential_keys
from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.validation.catalog import connector_catalog
from towline_step.protocol import DEFAULT_CREDENTIALS_DIR

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")
URL = "https://example.com"


def bearer(alias: str, key: str = "token") -> dict[str, Any]:
    return {"url": URL, "auth": {"bearer": {"credential": alias, "key": key}}}


def pod_spec(credentials: dict[str, str], inputs: dict[str, Any] | None = None,
             action: str = "http.request") -> dict[str, Any]:
    job = build_step_job(
        RUN, BuiltinAction(connector_catalog()), job_name="r-1-call-1", step_id="call", attempt=1, action=action,
        inputs=inputs if inputs is not None else {"url": URL}, credentials=credentials, idempotency_key="k",
        timeout_seconds=60, settings=StepPodSettings(),
    )
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def secret_volumes(spec: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v["secret"] for v in spec["volumes"] if "secret" in v}


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in spec["containers"][0]["env"]}


def test_a_secret_volume_holds_only_the_keys_the_step_reads() -> None:
    """A Secret with `token` and `admin-token`: the step reads `token`, so `admin-token` is not in the pod."""
    spec = pod_spec({"crm_main": "crm-api"}, bearer("crm_main"))
    assert secret_volumes(spec) == {"cred-crm-main": {
        "secretName": "crm-api", "defaultMode": 0o440, "optional": True,
        "items": [{"key": "token", "path": "token"}],
    }}
    assert all(set(v) <= {"name", "secret", "emptyDir"} for v in spec["volumes"]), "no projected or other source"
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["cred-crm-main"] == {"name": "cred-crm-main", "mountPath": f"{DEFAULT_CREDENTIALS_DIR}/crm_main",
                                       "readOnly": True}


def test_an_alias_the_step_never_reads_mounts_nothing() -> None:
    """An empty `items` would mount every key, so a named but unread credential gets no volume at all."""
    spec = pod_spec({"api": "api-token", "unused": "other-secret"}, bearer("api"))
    assert list(secret_volumes(spec)) == ["cred-api"]
    env = env_of(spec)
    assert json.loads(env["TOWLINE_CREDENTIAL_SECRETS"]) == {"api": "api-token"}
    assert json.loads(env["TOWLINE_CREDENTIAL_KEYS"]) == {"api": ["token"]}


@pytest.mark.parametrize(("action", "inputs", "credentials", "expected"), [
    ("notify.slack", {"text": "hi"}, {"slack": "ops-slack"}, {"slack": ["url"]}),
    ("webhook.send", {"url": URL, "payload": {}}, {"webhook": "hook-key"}, {"webhook": ["signing-secret"]}),
    ("http.request", {"url": URL, "auth": {"basic": {"credential": "svc"}}}, {"svc": "svc-login"},
     {"svc": ["password", "username"]}),
    ("http.request", {"url": URL, "auth": {"header": {"name": "X-Api-Key", "credential": "crm", "key": "api-key"}}},
     {"crm": "crm-api"}, {"crm": ["api-key"]}),
    ("notify.email", {"smtp": {"host": "smtp.example.com"}, "from": "a@example.com", "to": ["b@example.com"],
                      "subject": "s", "text": "t", "auth": {"credential": "smtp", "passwordKey": "app-password"}},
     {"smtp": "mail"}, {"smtp": ["app-password", "username"]}),
], ids=["slack-default", "webhook-default", "basic", "header", "email-keys"])
def test_connector_defaults_and_every_credential_slot_are_mounted(
    action: str, inputs: dict[str, Any], credentials: dict[str, str], expected: dict[str, list[str]]
) -> None:
    assert credential_keys(connector_catalog().credential_refs(action, inputs), credentials) == expected
    spec = pod_spec(credentials, inputs, action)
    [volume] = secret_volumes(spec).values()
    assert [item["key"] for item in volume["items"]] == next(iter(expected.values()))


def test_a_key_no_secret_could_hold_is_never_an_item() -> None:
    """A resolved input may name any string as a key; only names a Secret can have become paths in the pod."""
    assert credential_keys(connector_catalog().credential_refs("http.request", bearer("api", "../../etc/passwd")),
                           {"api": "api-token"}) == {}
    assert credential_keys(connector_catalog().credential_refs("http.request", bearer("api", "..")),
                           {"api": "api-token"}) == {}


def test_a_step_without_credentials_mounts_no_secret() -> None:
    spec = pod_spec({})
    assert not secret_volumes(spec)
    assert json.loads(env_of(spec)["TOWLINE_CREDENTIAL_SECRETS"]) == {}


def test_the_runner_gets_the_secret_names_keys_and_namespace_as_plain_values() -> None:
    spec = pod_spec({"api": "api-token"}, bearer("api"))
    by_name = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert json.loads(by_name["TOWLINE_CREDENTIAL_SECRETS"]["value"]) == {"api": "api-token"}
    assert json.loads(by_name["TOWLINE_CREDENTIAL_KEYS"]["value"]) == {"api": ["token"]}
    assert by_name["TOWLINE_NAMESPACE"]["value"] == "team"
    assert not any("valueFrom" in e for e in spec["containers"][0]["env"]), "no env var reads a Secret"
