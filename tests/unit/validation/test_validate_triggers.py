"""Params and triggers: typed defaults, cron syntax, time zones, webhook verification."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from towline.validation.triggers import cron_problem, time_zone_problem

Check = Callable[[dict[str, Any]], list[Any]]
STEPS = [{"id": "a", "action": "http.request", "with": {"url": "https://api.example.com"}}]


def schedule(cron: str, time_zone: str = "UTC") -> dict[str, Any]:
    return {"steps": STEPS, "triggers": [{"name": "t", "schedule": {"cron": cron, "timeZone": time_zone}}]}


@pytest.mark.parametrize(("declared", "default", "found"), [
    ("integer", "90", "a string"),
    ("integer", 1.5, "a number"),
    ("integer", True, "a boolean"),
    ("number", "x", "a string"),
    ("boolean", "yes", "a string"),
    ("string", 3, "an integer"),
    ("object", [1], "an array"),
    ("array", {"a": 1}, "an object"),
])
def test_a_param_default_must_have_the_declared_type(check: Check, declared: str, default: Any, found: str) -> None:
    errors = check({"params": [{"name": "p", "type": declared, "default": default}], "steps": STEPS})
    assert [(e.field, e.message) for e in errors] == [
        ("spec.params[0].default", f"is {found}, but the param is declared type: {declared}; fix one of them")
    ]


@pytest.mark.parametrize(("declared", "default"), [
    ("integer", 90), ("number", 2), ("number", 2.5), ("boolean", False), ("string", "x"),
    ("object", {"a": 1}), ("array", []),
])
def test_a_param_default_of_the_declared_type_is_fine(check: Check, declared: str, default: Any) -> None:
    assert check({"params": [{"name": "p", "type": declared, "default": default}], "steps": STEPS}) == []


def test_a_param_declared_twice_is_reported(check: Check) -> None:
    errors = check({"params": [{"name": "p"}, {"name": "p"}], "steps": STEPS})
    assert [e.field for e in errors] == ["spec.params[1].name"]


def test_a_trigger_declared_twice_is_reported_at_the_second(check: Check) -> None:
    daily = {"name": "nightly", "schedule": {"cron": "@daily", "timeZone": "UTC"}}
    errors = check({"steps": STEPS, "triggers": [daily, {"name": "hourly", "schedule": {"cron": "@hourly"}}, daily]})
    assert [(e.field, e.message) for e in errors] == [
        ("spec.triggers[2].name", "trigger 'nightly' is declared twice"),
    ]


@pytest.mark.parametrize("cron", ["0 8 * * 1-5", "*/5 * * * *", "@daily", "0 0 1 JAN *", "30 6 * * MON-FRI"])
def test_good_schedules_pass(check: Check, cron: str) -> None:
    assert check(schedule(cron, "Europe/Berlin")) == []


@pytest.mark.parametrize(("cron", "says"), [
    ("61 * * * *", "is not valid cron syntax"),
    ("0 25 * * *", "is not valid cron syntax"),
    ("* * * * * *", "has 6 fields; cron needs five"),
    ("0 8 * *", "has 4 fields"),
    ("@fortnightly", "is not a cron macro"),
    ("CRON_TZ=UTC 0 8 * * *", "put the zone in timeZone"),
])
def test_bad_cron_says_what_is_wrong(check: Check, cron: str, says: str) -> None:
    errors = check(schedule(cron))
    assert [e.field for e in errors] == ["spec.triggers[0].schedule.cron"]
    assert says in errors[0].message


def test_an_unknown_time_zone_suggests_the_close_match(check: Check) -> None:
    errors = check(schedule("@hourly", "Europe/Berln"))
    assert [(e.field, e.message) for e in errors] == [(
        "spec.triggers[0].schedule.timeZone",
        "'Europe/Berln' is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC); "
        "did you mean 'Europe/Berlin'?",
    )]


def test_time_zone_and_cron_helpers_accept_what_the_scheduler_reads() -> None:
    assert time_zone_problem("America/New_York") is None
    assert time_zone_problem("../etc/passwd") is not None
    assert cron_problem("  0 8 * * 1-5 ") is None


def test_a_trigger_needs_exactly_one_of_schedule_webhook_or_cloud_event(check: Check) -> None:
    errors = check({"steps": STEPS, "triggers": [{"name": "t"}]})
    assert errors[0].message == ("a trigger needs exactly one of schedule, webhook or cloudEvent (manual runs need "
                                 "no trigger)")


def webhook(verify: dict[str, Any]) -> dict[str, Any]:
    return {"steps": STEPS, "triggers": [{"name": "hook", "webhook": {"verify": verify}}]}


def test_a_signed_webhook_needs_a_secret_reference(check: Check) -> None:
    errors = check(webhook({"scheme": "github"}))
    assert errors[0].field == "spec.triggers[0].webhook.verify.secretRef"
    assert "kubectl create secret generic" in errors[0].message


def test_standard_webhooks_may_verify_with_a_public_key(check: Check) -> None:
    verify = {"scheme": "standard-webhooks", "publicKeyRef": {"name": "hook-key", "key": "public"}}
    assert check(webhook(verify)) == []


def test_unsigned_webhooks_must_be_allowed_explicitly(check: Check) -> None:
    errors = check(webhook({"scheme": "none"}))
    assert errors[0].field == "spec.triggers[0].webhook.verify.allowUnsigned"
    assert check(webhook({"scheme": "none", "allowUnsigned": True})) == []


def test_trigger_params_must_be_declared_and_typed(check: Check) -> None:
    spec = schedule("@daily")
    spec["params"] = [{"name": "days", "type": "integer"}]
    spec["triggers"][0]["params"] = {"dayz": 3, "days": "three"}
    errors = check(spec)
    assert [(e.field, e.message) for e in errors] == [
        ("spec.triggers[0].params.days", "is a string, but the param is declared type: integer"),
        ("spec.triggers[0].params.dayz",
         "the workflow declares no param 'dayz'; declare it under spec.params; did you mean 'days'?"),
    ]


def mapped_webhook(**extra: Any) -> dict[str, Any]:
    verify = {"scheme": "github", "secretRef": {"name": "hook", "key": "secret"}}
    return {"steps": STEPS, "triggers": [{"name": "hook", "webhook": {"verify": verify, **extra}}]}


def test_webhook_data_and_filter_read_only_body_and_headers(check: Check) -> None:
    valid = mapped_webhook(data={"tag": "body.release.tag_name"}, filter="headers['x-github-event'] == 'release'")
    assert check(valid) == []
    errors = check(mapped_webhook(data={"tag": "params.version"}))
    assert errors[0].field == "spec.triggers[0].webhook.data.tag"
    assert "read only body" in errors[0].message


def test_webhook_filter_must_compile(check: Check) -> None:
    errors = check(mapped_webhook(filter="body.action =="))
    assert errors[0].field == "spec.triggers[0].webhook.filter"
    assert "is not valid CEL" in errors[0].message


def test_a_public_key_is_only_for_standard_webhooks(check: Check) -> None:
    verify = {"scheme": "github", "secretRef": {"name": "hook", "key": "s"}, "publicKeyRef": {"name": "k", "key": "p"}}
    errors = check(webhook(verify))
    assert errors[0].field == "spec.triggers[0].webhook.verify.publicKeyRef"


@pytest.mark.parametrize(("extra", "field"), [
    ({"allowUnsigned": True}, "allowUnsigned"),
    ({"signatureHeader": "X-Sig"}, "signatureHeader"),
    ({"timestampHeader": "X-Time"}, "timestampHeader"),
])
def test_a_verify_setting_the_scheme_ignores_is_an_error(check: Check, extra: dict[str, Any], field: str) -> None:
    errors = check(webhook({"scheme": "github", "secretRef": {"name": "hook", "key": "secret"}, **extra}))
    assert errors[0].field == f"spec.triggers[0].webhook.verify.{field}"
    assert "remove" in errors[0].message
    hmac_ok = {"scheme": "hmac", "secretRef": {"name": "hook", "key": "secret"}, "signatureHeader": "X-Sig",
               "timestampHeader": "X-Time"}
    assert check(webhook(hmac_ok)) == []


@pytest.mark.parametrize("scheme", ["gitlab", "slack", "stripe", "shopify"])
def test_the_provider_schemes_need_a_secret_and_take_no_hmac_headers_or_public_key(check: Check, scheme: str) -> None:
    assert check(webhook({"scheme": scheme, "secretRef": {"name": "hook", "key": "secret"}})) == []
    assert check(webhook({"scheme": scheme}))[0].field == "spec.triggers[0].webhook.verify.secretRef"
    for extra, field in (({"signatureHeader": "X-Sig"}, "signatureHeader"),
                         ({"publicKeyRef": {"name": "k", "key": "p"}}, "publicKeyRef"),
                         ({"allowUnsigned": True}, "allowUnsigned")):
        errors = check(webhook({"scheme": scheme, "secretRef": {"name": "hook", "key": "secret"}, **extra}))
        assert errors[0].field == f"spec.triggers[0].webhook.verify.{field}", (extra, errors)
