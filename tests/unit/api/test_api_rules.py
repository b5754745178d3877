"""The CEL rules in the CRDs, evaluated here with a CEL interpreter; the API server runs the same text.

The integration tests prove the API server accepts and enforces them; these
pin down each rule's meaning quickly, one behaviour per test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cel
import pytest
from tests.yamlread import generated_crds

CRDS: dict[str, Any] = {name.split(".")[0]: crd for name, crd in generated_crds().items()}


def rules(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from node.get("x-kubernetes-validations", [])
    for child in node.get("properties", {}).values():
        yield from rules(child)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from rules(node[key])


def rule(plural: str, fragment: str) -> str:
    schema = CRDS[plural]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    found = [str(r["rule"]) for r in rules(schema) if fragment in r.get("message", r.get("messageExpression", ""))]
    assert len(found) >= 1, fragment
    return found[0]


def holds(source: str, new: Any, old: Any = None) -> bool:
    context = {"self": new} if old is None else {"self": new, "oldSelf": old}
    result = cel.evaluate(source, context)
    assert isinstance(result, bool)
    return result


@pytest.mark.parametrize(("step", "ok"), [
    ({"id": "a", "action": "http.request"}, True),
    ({"id": "a", "approval": {}}, True),
    ({"id": "a", "wait": {"duration": "1m"}}, True),
    ({"id": "a"}, False),
    ({"id": "a", "action": "http.request", "approval": {}}, False),
])
def test_a_step_has_exactly_one_kind(step: dict[str, Any], ok: bool) -> None:
    assert holds(rule("workflows", "exactly one of action"), step) is ok


def test_a_step_cannot_need_itself() -> None:
    source = rule("workflows", "cannot need itself")
    assert holds(source, {"id": "a", "needs": ["b"]})
    assert not holds(source, {"id": "a", "needs": ["b", "a"]})


def test_ids_are_unique_across_lists() -> None:
    source = rule("workflows", "ids in spec.finally must differ")
    assert holds(source, {"steps": [{"id": "a"}], "finally": [{"id": "b"}]})
    assert not holds(source, {"steps": [{"id": "a"}], "finally": [{"id": "a"}]})


def test_on_failure_names_a_compensation() -> None:
    source = rule("workflows", "onFailure must be fail, continue")
    assert holds(source, {"steps": [{"id": "a", "onFailure": "continue"}]})
    assert holds(source, {"steps": [{"id": "a", "onFailure": "undo"}], "compensations": [{"id": "undo"}]})
    assert not holds(source, {"steps": [{"id": "a", "onFailure": "undo"}]})


def test_credentials_hold_secret_names_not_values() -> None:
    schema = CRDS["workflows"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    credentials = schema["properties"]["spec"]["properties"]["steps"]["items"]["properties"]["credentials"]
    [secret_rule] = [r for r in credentials["x-kubernetes-validations"] if "messageExpression" in r]
    assert holds(secret_rule["rule"], {"crm": "crm-api", "slack": "ops.slack"})
    assert not holds(secret_rule["rule"], {"crm": "sk-proj-AbCdEf0123456789"})
    message = cel.evaluate(secret_rule["messageExpression"], {"self": {"ok": "a", "crm": "Bearer x"}})
    assert message.startswith("credentials.crm must name a Secret")


@pytest.mark.parametrize(("cron", "ok"), [
    ("0 8 * * 1-5", True), ("@daily", True), ("every morning", False), ("* * * *", False),
])
def test_cron_has_five_fields_or_a_macro(cron: str, ok: bool) -> None:
    assert holds(rule("workflows", "cron needs five fields"), cron) is ok


def test_unsigned_webhooks_need_allow_unsigned() -> None:
    source = rule("workflows", "scheme none accepts")
    assert not holds(source, {"scheme": "none"})
    assert holds(source, {"scheme": "none", "allowUnsigned": True})
    signed = rule("workflows", "a signed scheme needs secretRef")
    assert not holds(signed, {"scheme": "hmac"})
    assert holds(signed, {"scheme": "hmac", "secretRef": {"name": "s", "key": "k"}})


@pytest.mark.parametrize("field", ["workflowRef", "params", "trigger", "requestedBy"])
def test_a_runs_spec_is_immutable_except_its_switches(field: str) -> None:
    source = rule("workflowruns", f"spec.{field} is immutable")
    old = {"workflowRef": {"name": "w"}, "params": {"n": 1}, "trigger": {"type": "manual"}, "requestedBy": "carol"}
    assert holds(source, {**old, "cancel": True, "suspend": True}, old)
    assert not holds(source, {**old, field: {"changed": True}}, old)
    assert not holds(source, {k: v for k, v in old.items() if k != field}, old)


def test_a_cancelled_run_stays_cancelled() -> None:
    source = rule("workflowruns", "a cancelled run stays cancelled")
    assert holds(source, {"cancel": True}, {"cancel": False})
    assert not holds(source, {"cancel": False}, {"cancel": True})
    assert not holds(source, {}, {"cancel": True})


def test_an_approval_decision_is_final() -> None:
    source = rule("approvals", "spec.decision cannot change once set")
    assert holds(source, {"decision": "Approved"}, {})
    assert holds(source, {"decision": "Approved"}, {"decision": "Approved"})
    assert not holds(source, {"decision": "Rejected"}, {"decision": "Approved"})
    assert not holds(source, {}, {"decision": "Approved"})


def test_a_decision_records_who_decided() -> None:
    source = rule("approvals", "set spec.decidedBy to your Kubernetes user name")
    assert not holds(source, {"decision": "Approved"})
    assert holds(source, {"decision": "Approved", "decidedBy": "bob"})
    assert holds(source, {})


def test_decided_by_alone_is_refused() -> None:
    """decidedBy is final once set: alone, it would leave the gate impossible for anyone to decide."""
    source = rule("approvals", "set spec.decidedBy to your Kubernetes user name")
    assert not holds(source, {"decidedBy": "alice"})


def test_a_reason_comes_only_with_a_decision() -> None:
    source = rule("approvals", "spec.reason is the decider's")
    assert not holds(source, {"reason": "bob approved this"})
    assert holds(source, {"decision": "Rejected", "decidedBy": "bob", "reason": "not today"})
    assert holds(source, {})


@pytest.mark.parametrize("field", ["runName", "workflowName", "step", "message", "preview", "approvers",
                                   "fourEyes", "requestedBy", "earlierRequesters", "expiresAt"])
def test_an_approvals_gate_is_immutable(field: str) -> None:
    source = rule("approvals", f"spec.{field} is immutable")
    old = {field: "before"}
    assert holds(source, {field: "before", "decision": "Approved"}, old)
    assert not holds(source, {field: "after"}, old)
