"""One step at a time: its kind, action and inputs, credentials, egress, retry and onFailure.

Credentials are checked for shape only: a step names Secrets, and `with`
reads them through `{credential: alias, key: ...}`. Nothing here reads a
Secret, and no message repeats a value that might be one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping
from typing import Any

from towline.api.workflow import ValidationError, WorkflowSpec
from towline.expressions import string_leaves
from towline.validation.actions import ActionCatalog
from towline.validation.graph import LocatedStep, locate_steps, suggestion
from towline_connectors.netguard import opt_in_problem
from towline_connectors.wire import is_template, parse_rfc3339

# Shapes of well-known tokens and of an Authorization header with a literal value.
_INLINE_SECRET = re.compile(
    r"^(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{8,}$"
    r"|\b(sk-[A-Za-z0-9_-]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|glpat-[A-Za-z0-9_-]{20,})"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|^https://hooks\.slack\.com/services/\S+",
    re.I,
)


def step_errors(spec: WorkflowSpec, catalog: ActionCatalog) -> list[ValidationError]:
    """Problems local to each step (plus onFailure, which points into spec.compensations)."""
    compensations = [step.id for step in spec.compensations]
    main_ids = {step.id for step in spec.steps}
    errors: list[ValidationError] = []
    for item in locate_steps(spec):
        errors += _kind_errors(item)
        errors += action_errors(item, catalog)
        errors += credential_errors(item, catalog)
        errors += _network_errors(item)
        errors += host_errors(item, catalog)
        errors += _timing_errors(item)
        errors += _on_failure_errors(item, compensations, main_ids)
    return errors


def _kind_errors(item: LocatedStep) -> list[ValidationError]:
    step = item.step
    kinds = [name for name, value in (("action", step.action), ("approval", step.approval), ("wait", step.wait),
                                      ("workflow", step.workflow))
             if value is not None]
    errors = []
    if len(kinds) != 1:
        has = f"it has {' and '.join(kinds)}" if kinds else "it has none"
        errors.append(ValidationError(
            field=item.path, message=f"a step needs exactly one of action, approval, wait or workflow; {has}"
        ))
    if step.action is None:
        for name, present in (("with", bool(step.with_)), ("credentials", bool(step.credentials)),
                              ("egress", bool(step.egress)), ("allowHosts", bool(step.allow_hosts))):
            if present:
                errors.append(ValidationError(
                    field=f"{item.path}.{name}",
                    message=f"only action steps take {name}; add an action or remove {name}",
                ))
    return errors


def action_errors(item: LocatedStep, catalog: ActionCatalog) -> list[ValidationError]:
    action = item.step.action
    if action is None:
        return []
    reason = catalog.why_unavailable(action)
    if reason is not None:
        return [ValidationError(field=f"{item.path}.action", message=f"{action} {reason}")]
    known = catalog.known_actions()
    if action not in known:
        return [ValidationError(
            field=f"{item.path}.action",
            message=f"unknown action {action!r}{suggestion(action, known)}"
            + ("" if len(known) <= 20 else f"; known: {', '.join(known)}"),
        )]
    return [_input_error(item, message) for message in catalog.validate_inputs(action, item.step.with_)]


_INPUT_MESSAGE = re.compile(r"^with((?:\.[^\s:]+|\[\d+\])*): (.+)$", re.S)


def _input_error(item: LocatedStep, message: str) -> ValidationError:
    """A connector's `with.<field>: problem` message, placed at that field of this step."""
    match = _INPUT_MESSAGE.match(message)
    if match is None:
        return ValidationError(field=f"{item.path}.with", message=message)
    return ValidationError(field=f"{item.path}.with{match.group(1)}", message=match.group(2))


def credential_references(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(field, alias) of every `{credential: alias, ...}` mapping in a step's inputs."""
    if isinstance(value, Mapping):
        alias = value.get("credential")
        if isinstance(alias, str) and not is_template(alias):
            yield f"{path}.credential", alias
        for key, item in value.items():
            yield from credential_references(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from credential_references(item, f"{path}[{index}]")


def credential_errors(item: LocatedStep, catalog: ActionCatalog) -> list[ValidationError]:
    declared = item.step.credentials
    errors = []
    explicit = list(credential_references(item.step.with_, f"{item.path}.with"))
    for field, alias in explicit:
        if alias not in declared:
            errors.append(ValidationError(
                field=field,
                message=f"credential {alias!r} is not declared; {_declare(item, alias)}{suggestion(alias, declared)}",
            ))
    action = item.step.action
    slots = catalog.credential_slots(action) if action is not None else None
    for alias in item.step.credentials:
        if slots is not None and alias not in slots:
            errors.append(ValidationError(
                field=f"{item.path}.credentials.{alias}",
                message=f"{action} has no credential slot {alias!r}; its slots: {', '.join(slots) or 'none'}. "
                "Bind only those: nothing else is mounted into its pod",
            ))
    if action is not None and action in catalog.known_actions():
        written = {alias for _, alias in explicit}
        for alias, key in dict.fromkeys(catalog.credential_refs(action, item.step.with_)):
            if alias not in declared and alias not in written:
                errors.append(ValidationError(
                    field=f"{item.path}.credentials",
                    message=f"{action} reads credential {alias!r} (key {key!r}) by default; {_declare(item, alias)}",
                ))
    for field, _ in _token_like_strings(item.step.with_, f"{item.path}.with"):
        errors.append(ValidationError(
            field=field,
            message="looks like a credential written inline, where everyone who can read the Workflow sees it; "
            "put it in a Secret (kubectl create secret generic NAME --from-literal=token=...), name the Secret "
            "under credentials and read it with {credential: ALIAS, key: token}",
        ))
    return errors


def _declare(item: LocatedStep, alias: str) -> str:
    secret = alias.replace("_", "-")
    return (f"add it under {item.path}.credentials naming a Secret in this namespace, "
            f"e.g. credentials: {{{alias}: {secret}}}")


def _token_like_strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Literal strings in inputs that look like tokens (templates and references excluded)."""
    for where, text in string_leaves(value, path):
        if not is_template(text) and _INLINE_SECRET.search(text.strip()):
            yield where, text


def _network_errors(item: LocatedStep) -> list[ValidationError]:
    errors = []
    cidrs = [(f"{item.path}.egress[{i}].cidr", rule.cidr) for i, rule in enumerate(item.step.egress)]
    cidrs += [(f"{item.path}.allowPrivateNetworks[{i}]", c) for i, c in enumerate(item.step.allow_private_networks)]
    for field, text in cidrs:
        problem = cidr_problem(text)
        if problem is not None:
            errors.append(ValidationError(field=field, message=problem))
    for index, text in enumerate(item.step.allow_private_networks):
        # The in-pod guard refuses the same opt-ins (one rule, from towline_connectors.netguard).
        problem = None if cidr_problem(text) else opt_in_problem(ipaddress.ip_network(text))
        if problem is not None:
            errors.append(ValidationError(field=f"{item.path}.allowPrivateNetworks[{index}]", message=problem))
    return errors


def host_errors(item: LocatedStep, catalog: ActionCatalog) -> list[ValidationError]:
    """A step with credentials talks only to hosts fixed in the Workflow: its URL's literal host or allowHosts;
    a code step that connects anywhere only to its allowHosts."""
    step = item.step
    if (step.action is not None and not step.allow_hosts and catalog.is_code(step.action)
            and catalog.destination_hosts(step.action, step.with_)):
        return [ValidationError(field=f"{item.path}.allowHosts", message=code_hosts_message(step.action))]
    if not step.credentials or step.allow_hosts or step.action not in catalog.known_actions():
        return []
    assert step.action is not None
    if all(host is not None for host in catalog.destination_hosts(step.action, step.with_)):
        return []
    return [ValidationError(field=f"{item.path}.allowHosts", message=templated_host_message(sorted(step.credentials)))]


def code_hosts_message(action: str) -> str:
    """Why a code step that connects somewhere needs allowHosts, and the fix."""
    what = "fetches its module from a URL" if action == "code.wasm" else "asks for network access (with.ports)"
    return (
        f"this {action} step {what} but lists no allowHosts; a code step's own connections do not pass the SSRF "
        "guard, so without an allowlist its ports would open to every public address; list the hosts it may "
        "reach, e.g. allowHosts: [api.example.com] (an IP address keeps the NetworkPolicy exact), see "
        "docs/code-steps.md"
    )


def templated_host_message(aliases: list[str]) -> str:
    """Why a step with credentials and a host known only at run time cannot run, and the fix."""
    return (
        f"this step mounts credentials ({', '.join(aliases)}) but the host it connects to is only known at run "
        "time (a ${{ }} binding), so whoever supplies the run's inputs could send the credentials anywhere; list "
        "the hosts it may reach under allowHosts, e.g. allowHosts: [api.example.com], or write the host literally"
    )


def cidr_problem(text: str) -> str | None:
    """Why `text` is not a network CIDR, or None."""
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError:
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            return f"{text!r} is not a CIDR; write an IPv4 or IPv6 network such as 203.0.113.0/24 or 2001:db8::/48"
        return f"{text!r} has host bits set; did you mean {str(network)!r}?"
    if "/" not in text:
        return f"{text!r} has no prefix length; write {text}/32 for one IPv4 address (/128 for IPv6)"
    return None


def _timing_errors(item: LocatedStep) -> list[ValidationError]:
    step = item.step
    errors = []
    if step.retry is not None and step.retry.max_delay_seconds < step.retry.base_delay_seconds:
        errors.append(ValidationError(
            field=f"{item.path}.retry.maxDelaySeconds",
            message=f"is smaller than baseDelaySeconds ({step.retry.base_delay_seconds:g}); raise it or lower that",
        ))
    wait = step.wait
    if wait is not None:
        if (wait.duration is None) == (wait.until is None):
            errors.append(ValidationError(
                field=f"{item.path}.wait", message="a wait needs exactly one of duration or until"
            ))
        if wait.until is not None and not is_template(wait.until) and not _is_rfc3339(wait.until):
            errors.append(ValidationError(
                field=f"{item.path}.wait.until",
                message="is not an RFC 3339 time; write e.g. 2026-12-01T08:00:00Z or a ${{ }} binding",
            ))
    return errors


def _is_rfc3339(text: str) -> bool:
    try:
        parsed = parse_rfc3339(text)
    except ValueError:
        return False
    return "T" in text.upper() and parsed.tzinfo is not None


def _on_failure_errors(item: LocatedStep, compensations: list[str], main_ids: set[str]) -> list[ValidationError]:
    target = item.step.on_failure
    if target in ("fail", "continue"):
        return []
    field = f"{item.path}.onFailure"
    if item.section != "steps":
        return [ValidationError(
            field=field, message=f"only steps under spec.steps name a compensation; under spec.{item.section} "
            "use fail or continue",
        )]
    if target in compensations:
        return []
    hint = (
        f"; {target!r} is under spec.steps: move it under spec.compensations" if target in main_ids
        else suggestion(target, compensations)
    )
    return [ValidationError(
        field=field,
        message=f"{target!r} is neither fail, continue nor the id of a step under spec.compensations{hint}",
    )]
