"""Credentials are references, never values; egress names networks; schema errors name the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from towline.validation import parse_workflow_spec

Check = Callable[[dict[str, Any]], list[Any]]
TOKEN = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123"  # a fake token the messages must never repeat


def http(**extra: Any) -> dict[str, Any]:
    return {"id": "call", "action": "http.request", "with": {"url": "https://api.example.com"}, **extra}


def test_a_credential_value_inlined_gets_the_fix_and_is_never_echoed(check: Check) -> None:
    errors = check({"steps": [http(credentials={"crm": TOKEN})]})
    assert [(e.field, e.message) for e in errors] == [(
        "spec.steps[0].credentials.crm",
        "must name a Secret in this namespace, never hold the credential itself; put the value in a Secret and "
        "reference it by name: kubectl create secret generic crm --from-literal=token=... "
        "then write credentials: {crm: crm}",
    )]


def test_a_credential_given_as_a_mapping_is_refused_the_same_way(check: Check) -> None:
    errors = check({"steps": [http(credentials={"crm_api": {"token": TOKEN}})]})
    assert errors[0].field == "spec.steps[0].credentials.crm_api"
    assert "kubectl create secret generic crm-api" in errors[0].message
    assert TOKEN not in str(errors)


def test_a_credential_alias_must_be_an_identifier(check: Check) -> None:
    errors = check({"steps": [http(credentials={"CRM-Key": "crm-api"})]})
    assert errors[0].field == "spec.steps[0].credentials.CRM-Key"
    assert "is not a valid key here" in errors[0].message


def test_a_credential_read_in_with_must_be_declared(check: Check) -> None:
    step = http(credentials={"crm": "crm-api"})
    step["with"]["auth"] = {"bearer": {"credential": "crn", "key": "token"}}
    errors = check({"steps": [step]})
    assert [(e.field, e.message) for e in errors] == [(
        "spec.steps[0].with.auth.bearer.credential",
        "credential 'crn' is not declared; add it under spec.steps[0].credentials naming a Secret in this "
        "namespace, e.g. credentials: {crn: crn}; did you mean 'crm'?",
    )]


def test_a_credential_an_action_reads_by_default_must_be_declared(check: Check) -> None:
    errors = check({"steps": [{"id": "tell", "action": "notify.slack", "with": {"text": "hi"}}]})
    assert [(e.field, e.message) for e in errors] == [(
        "spec.steps[0].credentials",
        "notify.slack reads credential 'slack' (key 'url') by default; add it under spec.steps[0].credentials "
        "naming a Secret in this namespace, e.g. credentials: {slack: slack}",
    )]


@pytest.mark.parametrize("value", [
    f"Bearer {TOKEN}",
    TOKEN,
    "xoxb-1234567890-abcdefghij",
    "ghp_abcdefghijklmnopqrstuvwxyz0123",
    "AKIAABCDEFGHIJKLMNOP",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIB...",
    "https://hooks.slack.com/services/T000/B000/XXXX",
])
def test_a_token_written_into_inputs_is_refused_without_repeating_it(check: Check, value: str) -> None:
    step = http()
    step["with"]["headers"] = {"Authorization": value}
    errors = check({"steps": [step]})
    assert [e.field for e in errors] == ["spec.steps[0].with.headers.Authorization"]
    assert errors[0].message.startswith("looks like a credential written inline")
    assert value not in errors[0].message


@pytest.mark.parametrize("value", ["Bearer ${{ trigger.data.token }}", "application/json", "Basic realm", "sk-short"])
def test_ordinary_header_values_are_not_mistaken_for_tokens(check: Check, value: str) -> None:
    step = http()
    step["with"]["headers"] = {"Authorization": value}
    assert check({"steps": [step]}) == []


@pytest.mark.parametrize(("cidr", "says"), [
    ("10.0.0.1/24", "has host bits set; did you mean '10.0.0.0/24'?"),
    ("203.0.113.0/33", "is not a CIDR"),
    ("crm.example.com", "is not a CIDR"),
    ("203.0.113.7", "has no prefix length; write 203.0.113.7/32"),
])
def test_egress_names_networks(check: Check, cidr: str, says: str) -> None:
    errors = check({"steps": [http(egress=[{"cidr": cidr, "ports": [443]}])]})
    assert [e.field for e in errors] == ["spec.steps[0].egress[0].cidr"]
    assert says in errors[0].message


def test_private_network_opt_ins_are_checked_too(check: Check) -> None:
    errors = check({"steps": [http(allowPrivateNetworks=["10.0.0.0/8", "10.1.2.3/8"])]})
    assert [e.field for e in errors] == ["spec.steps[0].allowPrivateNetworks[1]"]


@pytest.mark.parametrize(("cidr", "says"), [
    ("::/0", "::/0 is too broad to opt into (prefixes shorter than /7 for IPv6 are refused); name the private range"),
    ("0.0.0.0/0", "prefixes shorter than /8 for IPv4 are refused"),
    ("64:ff9b:1::/48", "overlaps 64:ff9b:1::/48, which no opt-in opens; name a range outside it"),
])
def test_an_opt_in_too_broad_or_never_opened_is_refused_naming_the_field_and_the_fix(
    check: Check, cidr: str, says: str
) -> None:
    errors = check({"steps": [http(allowPrivateNetworks=["10.20.0.0/16", cidr])]})
    assert [e.field for e in errors] == ["spec.steps[0].allowPrivateNetworks[1]"]
    assert says in errors[0].message


def test_retry_max_delay_cannot_be_below_the_base_delay(check: Check) -> None:
    errors = check({"steps": [http(retry={"limit": 3, "baseDelaySeconds": 600})]})
    assert [e.field for e in errors] == ["spec.steps[0].retry.maxDelaySeconds"]


def test_wait_until_is_an_rfc3339_time_or_a_binding(check: Check) -> None:
    assert check({"steps": [{"id": "w", "wait": {"until": "2026-12-01T08:00:00Z"}}]}) == []
    assert check({"steps": [{"id": "w", "wait": {"until": "${{ trigger.data.at }}"}}]}) == []
    errors = check({"steps": [{"id": "w", "wait": {"until": "next monday"}}]})
    assert [e.field for e in errors] == ["spec.steps[0].wait.until"]
    errors = check({"steps": [{"id": "w", "wait": {}}]})
    assert errors[0].message == "a wait needs exactly one of duration or until"


def test_schema_errors_use_the_users_spelling_of_the_path() -> None:
    spec, errors = parse_workflow_spec({
        "steps": [{"id": "a", "action": "http.request", "timeoutSecond": 5, "retry": {"limit": "many"}}],
        "finally": [{"action": "notify.slack"}],
    })
    assert spec is None
    assert [(e.field, e.message) for e in errors] == [
        ("spec.steps[0].retry.limit", "Input should be a valid integer, unable to parse string as an integer"),
        ("spec.steps[0].timeoutSecond",
         "is not a field here; check the spelling (fields are camelCase, e.g. timeoutSeconds)"),
        ("spec.finally[0].id", "is required"),
    ]


def test_schema_errors_never_repeat_input_values() -> None:
    _, errors = parse_workflow_spec({"steps": [{"id": "a", "action": "x.y", "timeoutSeconds": TOKEN}]})
    assert errors and TOKEN not in str(errors)


def test_a_step_with_credentials_and_a_templated_host_needs_allow_hosts(check: Check) -> None:
    step = http(credentials={"crm": "crm-api"}, **{"with": {"url": "https://${{ params.host }}/accounts"}})
    errors = check({"params": [{"name": "host"}], "steps": [step]})
    assert [e.field for e in errors] == ["spec.steps[0].allowHosts"]
    assert "mounts credentials (crm)" in errors[0].message and "allowHosts: [api.example.com]" in errors[0].message


def test_allow_hosts_fixes_a_templated_host_with_credentials(check: Check) -> None:
    step = http(credentials={"crm": "crm-api"}, allowHosts=["api.example.com", "*.crm.example.org"],
                **{"with": {"url": "https://${{ params.host }}/accounts"}})
    assert check({"params": [{"name": "host"}], "steps": [step]}) == []


def test_a_templated_path_with_credentials_is_fine_because_the_host_is_fixed(check: Check) -> None:
    step = http(credentials={"crm": "crm-api"}, **{"with": {"url": "https://api.example.com/${{ params.id }}"}})
    assert check({"params": [{"name": "id"}], "steps": [step]}) == []


def test_a_templated_host_without_credentials_needs_no_allow_hosts(check: Check) -> None:
    step = http(**{"with": {"url": "https://${{ params.host }}/"}})
    assert check({"params": [{"name": "host"}], "steps": [step]}) == []


def test_allow_hosts_must_be_host_names(check: Check) -> None:
    errors = check({"steps": [http(allowHosts=["https://api.example.com/x"])]})
    assert errors and errors[0].field.startswith("spec.steps[0].allowHosts")


def test_allow_hosts_on_an_approval_step_is_refused(check: Check) -> None:
    errors = check({"steps": [{"id": "ok", "approval": {}, "allowHosts": ["api.example.com"]}]})
    assert [e.field for e in errors] == ["spec.steps[0].allowHosts"]
