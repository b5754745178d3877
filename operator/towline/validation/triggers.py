"""Params and triggers: typed defaults, cron syntax and time zones, webhook verification and mapping.

A schedule is checked the way the scheduler will read it (croniter, zoneinfo),
so a Workflow that is Ready never fails at its first tick.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from croniter import croniter

from towline.api.webhooks import CLOUD_EVENT_SCHEMES, CloudEventTrigger, WebhookTrigger, WebhookVerification
from towline.api.workflow import (
    Param,
    ScheduleTrigger,
    ValidationError,
    WorkflowSpec,
    fits_param_type,
)
from towline.expressions import ExpressionError, unknown_variables
from towline.validation.graph import suggestion
from towline_connectors.wire import is_template

CRON_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})

def param_type_problem(param: Param, value: Any) -> str | None:
    """Why `value` does not fit the param's declared type, or None (templates always fit)."""
    if is_template(value):
        return None
    if fits_param_type(value, param.type):
        return None
    return f"is {_json_type(value)}, but the param is declared type: {param.type}"


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "an object",
             list: "an array"}
    return names.get(type(value), type(value).__name__)


def _names_declared_twice(names: list[str], section: str, what: str) -> list[ValidationError]:
    """An error at `section[i].name` for each name an earlier item already has: a list's names are unique."""
    errors = []
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            errors.append(ValidationError(field=f"{section}[{index}].name",
                                          message=f"{what} {name!r} is declared twice"))
        seen.add(name)
    return errors


def param_errors(spec: WorkflowSpec) -> list[ValidationError]:
    errors = _names_declared_twice([param.name for param in spec.params], "spec.params", "param")
    for index, param in enumerate(spec.params):
        path = f"spec.params[{index}]"
        if param.default is not None:
            problem = param_type_problem(param, param.default)
            if problem:
                errors.append(ValidationError(field=f"{path}.default", message=f"{problem}; fix one of them"))
    return errors


def trigger_errors(spec: WorkflowSpec) -> list[ValidationError]:
    params = {param.name: param for param in spec.params}
    errors = _names_declared_twice([trigger.name for trigger in spec.triggers], "spec.triggers", "trigger")
    for index, trigger in enumerate(spec.triggers):
        path = f"spec.triggers[{index}]"
        if sum(kind is not None for kind in (trigger.schedule, trigger.webhook, trigger.cloud_event)) != 1:
            errors.append(ValidationError(
                field=path,
                message="a trigger needs exactly one of schedule, webhook or cloudEvent (manual runs need no trigger)",
            ))
        if trigger.schedule is not None:
            errors += schedule_errors(trigger.schedule, f"{path}.schedule")
        if trigger.webhook is not None:
            errors += webhook_errors(trigger.webhook.verify, f"{path}.webhook.verify")
            errors += webhook_mapping_errors(trigger.webhook, f"{path}.webhook")
        if trigger.cloud_event is not None:
            errors += cloud_event_errors(trigger.cloud_event, f"{path}.cloudEvent")
        errors += _trigger_param_errors(trigger.params, params, f"{path}.params")
    return errors


def schedule_errors(schedule: ScheduleTrigger, path: str) -> list[ValidationError]:
    errors = []
    problem = cron_problem(schedule.cron)
    if problem:
        errors.append(ValidationError(field=f"{path}.cron", message=problem))
    problem = time_zone_problem(schedule.time_zone)
    if problem:
        errors.append(ValidationError(field=f"{path}.timeZone", message=problem))
    return errors


def cron_problem(expression: str) -> str | None:
    """Why a cron expression will not schedule, or None. Five fields or a macro, as CronJobs take."""
    text = expression.strip()
    example = 'e.g. "0 8 * * 1-5" (08:00 on weekdays) or @daily'
    if text.startswith("@"):
        if text in CRON_MACROS:
            return None
        return f"{text!r} is not a cron macro; use one of {', '.join(sorted(CRON_MACROS))}"
    fields = text.split()
    if len(fields) != 5:
        return (f"has {len(fields)} fields; cron needs five (minute hour day-of-month month day-of-week), {example}"
                + ("; put the zone in timeZone" if text.upper().startswith(("CRON_TZ", "TZ")) else ""))
    if not croniter.is_valid(text):
        return f"is not valid cron syntax; check each field's range (minute 0-59, hour 0-23, ...), {example}"
    return None


@lru_cache(maxsize=1)
def _time_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def time_zone_problem(name: str) -> str | None:
    """Why `name` is not an IANA time zone, or None."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        hint = suggestion(name, _time_zones())
        return f"{name!r} is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC){hint}"
    return None


def webhook_errors(verify: WebhookVerification, path: str) -> list[ValidationError]:
    unused = _unused_verify_fields(verify)
    if unused:
        field, message = unused
        return [ValidationError(field=f"{path}.{field}", message=message)]
    if verify.scheme == "none":
        if not verify.allow_unsigned:
            return [ValidationError(
                field=f"{path}.allowUnsigned",
                message="scheme none accepts anyone's requests; set allowUnsigned: true to mean it, "
                "or use a signed scheme (github, standard-webhooks, hmac, bearer, gitlab, slack, stripe, shopify) "
                "with a secretRef",
            )]
        return []
    if verify.public_key_ref is not None and verify.scheme != "standard-webhooks":
        return [ValidationError(
            field=f"{path}.publicKeyRef",
            message=f"publicKeyRef (ed25519) is for scheme standard-webhooks; scheme {verify.scheme} signs with "
            "a shared secret in secretRef",
        )]
    if verify.secret_ref is None and not (verify.scheme == "standard-webhooks" and verify.public_key_ref):
        return [ValidationError(
            field=f"{path}.secretRef",
            message=f"scheme {verify.scheme} needs secretRef: {{name, key}} naming the Secret with the signing "
            "secret, e.g. kubectl create secret generic crm-webhook --from-literal=signing-secret=...",
        )]
    return []


def _unused_verify_fields(verify: WebhookVerification) -> tuple[str, str] | None:
    """A setting the scheme would ignore: an error, so nobody believes it protects them."""
    given = verify.model_fields_set
    if verify.allow_unsigned and verify.scheme != "none":
        return "allowUnsigned", (f"allowUnsigned applies only to scheme none; scheme {verify.scheme} always requires "
                                 "a valid signature, so remove allowUnsigned")
    for field, name in (("signature_header", "signatureHeader"), ("timestamp_header", "timestampHeader")):
        if field in given and verify.scheme != "hmac":
            return name, (f"{name} applies only to scheme hmac; scheme {verify.scheme} reads its own headers, "
                          f"so remove {name}")
    return None


WEBHOOK_VARIABLES = frozenset({"body", "headers"})
"""What a webhook trigger's `data` and `filter` expressions read: the parsed payload and the headers."""


def webhook_mapping_errors(webhook: WebhookTrigger, path: str) -> list[ValidationError]:
    """The `filter` and `data` expressions compile and read only `body` and `headers`."""
    return _mapping_errors(
        webhook.filter, webhook.data, path, WEBHOOK_VARIABLES,
        "a webhook's filter and data read only body (the parsed payload) and headers (lower-case names), "
        "e.g. body.order.id or headers['x-github-event']")


def _mapping_errors(filter_source: str | None, data: Mapping[str, str], path: str, variables: frozenset[str],
                    reads_only: str) -> list[ValidationError]:
    """A trigger's `filter` and `data` expressions compile and read only `variables` (`reads_only` says which)."""
    sources = [(f"{path}.filter", filter_source)] if filter_source is not None else []
    sources += [(f"{path}.data.{key}", source) for key, source in data.items()]
    errors = []
    for field, source in sources:
        try:
            unknown = unknown_variables(source, variables)
        except ExpressionError as error:
            errors.append(ValidationError(field=field, message=f"is not valid CEL: {error}"))
            continue
        if unknown:
            errors.append(ValidationError(field=field, message=f"reads {', '.join(sorted(unknown))}; {reads_only}"))
    return errors


CLOUD_EVENT_VARIABLES = frozenset({"event"})
"""What a cloudEvent trigger's `data` and `filter` expressions read: the event's attributes and `event.data`."""


def cloud_event_errors(trigger: CloudEventTrigger, path: str) -> list[ValidationError]:
    """A cloudEvent trigger: a scheme a CloudEvents sender can use, its verification, and CEL over `event`."""
    if trigger.verify.scheme not in CLOUD_EVENT_SCHEMES:
        return [ValidationError(
            field=f"{path}.verify.scheme",
            message=f"scheme {trigger.verify.scheme} signs its provider's own payloads, not CloudEvents; use "
            "standard-webhooks, hmac or bearer (or none with allowUnsigned: true)",
        )]
    return webhook_errors(trigger.verify, f"{path}.verify") + _mapping_errors(
        trigger.filter, trigger.data, path, CLOUD_EVENT_VARIABLES,
        "a cloudEvent trigger's filter and data read only event (its attributes, e.g. event.type, event.source, "
        "event.subject, and its payload as event.data)")


def _trigger_param_errors(values: Mapping[str, Any], params: Mapping[str, Param], path: str) -> list[ValidationError]:
    errors = []
    for name, value in values.items():
        param = params.get(name)
        if param is None:
            errors.append(ValidationError(
                field=f"{path}.{name}",
                message=f"the workflow declares no param {name!r}; declare it under spec.params"
                f"{suggestion(name, params)}",
            ))
            continue
        problem = param_type_problem(param, value)
        if problem:
            errors.append(ValidationError(field=f"{path}.{name}", message=problem))
    return errors
