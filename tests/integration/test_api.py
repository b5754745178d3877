"""The three resources against the real API server: examples apply, bad manifests are refused.

A bad manifest is caught by one of two layers. The API server rejects what the
CRD's schema and CEL rules can see (types, formats, sizes, unique ids,
immutable run specs, final decisions); the operator marks a Workflow
`Ready=False` for what only it can check (the graph, CEL, connectors, cron,
time zones, credential use). Every case asserts the message names the field.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.support import get, wait_for

from towline.validation import validate_workflow_manifest
from towline.validation.catalog import connector_catalog
from towline_dev.controlplane import ControlPlane

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
OPERATOR_USER = "system:serviceaccount:towline-system:towline-operator"
TOKEN = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123"  # a fake credential no error may repeat

WORKFLOW: dict[str, Any] = {
    "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "renewals"},
    "spec": {
        "params": [{"name": "days", "type": "integer", "default": 7}],
        "triggers": [{"name": "nightly", "schedule": {"cron": "0 2 * * *", "timeZone": "Europe/Berlin"}}],
        "steps": [
            {"id": "load", "action": "http.request", "credentials": {"crm": "crm-api"},
             "with": {"url": "https://crm.example.com/api?days=${{ params.days }}",
                      "auth": {"bearer": {"credential": "crm", "key": "token"}}},
             "egress": [{"cidr": "203.0.113.0/24", "ports": [443]}], "retry": {"limit": 2}},
            {"id": "review", "needs": ["load"],
             "approval": {"message": "Go?", "approvers": {"groups": ["leads"]}, "expiresAfter": "4h"}},
            {"id": "tell", "needs": ["review"], "action": "notify.slack", "credentials": {"slack": "ops-slack"},
             "with": {"text": "done: ${{ steps.load.output.status }}"}},
        ],
    },
}


def changed(document: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy with `path: value` changes applied; paths like `spec.steps[0].retry.limit`."""
    result = copy.deepcopy(document)
    for path, value in changes.items():
        *parents, last = re.findall(r"[^.\[\]]+", path)
        node: Any = result
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[int(last) if last.isdigit() else last] = value
    return result


def kubectl(plane: ControlPlane, *args: str, document: dict[str, Any] | None = None, as_operator: bool = False) -> Any:
    extra = ["--as", OPERATOR_USER, "--as-group", "system:masters"] if as_operator else []
    stdin = None if document is None else yaml.safe_dump(document)
    return plane.kubectl(*args, *extra, stdin=stdin, check=False)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_applies_cleanly(crds_installed: ControlPlane, namespace: str, path: Path) -> None:
    result = kubectl(crds_installed, "apply", "-n", namespace, "-f", str(path))
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    for document in yaml.safe_load_all(path.read_text()):
        assert validate_workflow_manifest(document["spec"], connector_catalog())[1] == []


def test_there_are_examples_for_every_story() -> None:
    names = {path.stem for path in EXAMPLES}
    assert {"scheduled-http-check", "webhook-deploy-with-approval", "order-fulfilment-with-compensation",
            "ai-ticket-triage", "multi-cluster-rollout"} <= names


# (case, changes to WORKFLOW, what the API server's error must say)
REJECTED_BY_THE_API_SERVER = [
    ("wrong type", {"spec.steps[0].retry.limit": "four"},
     ["spec.steps[0].retry.limit", "must be of type integer"]),
    ("unknown field", {"spec.steps[0].timeoutSecond": 30}, ['unknown field "spec.steps[0].timeoutSecond"']),
    ("no steps", {"spec.steps": []}, ["spec.steps", "should have at least 1 items"]),
    ("duplicate step ids", {"spec.steps[2].id": "load"}, ["spec.steps[2]: Duplicate value", '"id":"load"']),
    ("id reused by a finally step", {"spec.finally": [{"id": "load", "action": "notify.slack"}]},
     ["spec.finally", "ids in spec.finally must differ from those in spec.steps"]),
    ("step id not snake_case", {"spec.steps[0].id": "Load-Accounts"}, ["spec.steps[0].id", "should match"]),
    ("step with no kind", {"spec.steps[1].approval": None},
     ["spec.steps[1]", "a step needs exactly one of action"]),
    ("step with two kinds", {"spec.steps[1].wait": {"duration": "5m"}},
     ["spec.steps[1]", "a step needs exactly one of action"]),
    ("step needs itself", {"spec.steps[1].needs": ["review"]}, ["spec.steps[1].needs", "cannot need itself"]),
    ("with on an approval step", {"spec.steps[1].with": {"url": "x"}},
     ["spec.steps[1].with", "with holds an action's inputs"]),
    ("cron is not five fields", {"spec.triggers[0].schedule.cron": "every night"},
     ["spec.triggers[0].schedule.cron", "cron needs five fields"]),
    ("unknown concurrency policy", {"spec.triggers[0].schedule.concurrencyPolicy": "Never"},
     ["spec.triggers[0].schedule.concurrencyPolicy", 'Unsupported value: "Never"']),
    ("trigger with schedule and webhook",
     {"spec.triggers[0].webhook": {"verify": {"scheme": "github", "secretRef": {"name": "gh", "key": "s"}}}},
     ["spec.triggers[0]", "exactly one of schedule, webhook or cloudEvent"]),
    ("cloudEvent trigger with a provider's scheme",
     {"spec.triggers[0]": {"name": "paid", "cloudEvent": {
         "verify": {"scheme": "github", "secretRef": {"name": "gh", "key": "s"}}, "types": ["com.example.paid"]}}},
     ["spec.triggers[0].cloudEvent.verify.scheme", "a cloudEvent trigger is verified with standard-webhooks"]),
    ("unsigned webhook not allowed", {"spec.triggers[0]": {"name": "hook", "webhook": {"verify": {"scheme": "none"}}}},
     ["spec.triggers[0].webhook.verify.allowUnsigned", "set allowUnsigned: true"]),
    ("signed webhook without secret", {"spec.triggers[0]": {"name": "hook", "webhook": {"verify": {"scheme": "hmac"}}}},
     ["spec.triggers[0].webhook.verify", "needs secretRef"]),
    ("credential value inlined", {"spec.steps[0].credentials.crm": TOKEN},
     ["spec.steps[0].credentials", "credentials.crm must name a Secret", "kubectl create secret generic"]),
    ("secret value as a webhook secretRef",
     {"spec.triggers[0]": {"name": "hook", "webhook": {"verify": {"scheme": "github",
                                                                   "secretRef": {"name": TOKEN, "key": "s"}}}}},
     ["spec.triggers[0].webhook.verify.secretRef.name", "never the secret itself"]),
    ("credential alias not an identifier", {"spec.steps[0].credentials": {"CRM Key": "crm-api"}},
     ["spec.steps[0].credentials", "every key must match"]),
    ("egress is not a CIDR", {"spec.steps[0].egress[0].cidr": "crm.example.com"},
     ["spec.steps[0].egress[0].cidr", "must be an IPv4 or IPv6 CIDR"]),
    ("port out of range", {"spec.steps[0].egress[0].ports": [70000]},
     ["spec.steps[0].egress[0].ports[0]", "less than or equal to 65535"]),
    ("duration in words", {"spec.steps[1].approval.expiresAfter": "one day"},
     ["spec.steps[1].approval.expiresAfter", "should match"]),
    ("oversized when", {"spec.steps[2].when": "true && " * 600 + "true"},
     ["spec.steps[2].when", "Too long: may not be more than 4096"]),
    ("too many needs", {"spec.steps[2].needs": [f"s{i}" for i in range(101)]},
     ["spec.steps[2].needs", "must have at most 100 items"]),
    ("onFailure names no compensation", {"spec.steps[0].onFailure": "undo_load"},
     ["spec.steps", "onFailure must be fail, continue, or the id of a step under spec.compensations"]),
    ("notification with events and their old name",
     {"spec.approvalNotifications": [{"events": ["opened"], "on": ["opened"], "action": "notify.slack"}]},
     ["spec.approvalNotifications[0].on", "on is the old name of events: write events only"]),
    ("notification without events", {"spec.approvalNotifications": [{"action": "notify.slack"}]},
     ["spec.approvalNotifications[0].events", "events is required"]),
]


@pytest.mark.parametrize(("changes", "expected"), [c[1:] for c in REJECTED_BY_THE_API_SERVER],
                         ids=[c[0] for c in REJECTED_BY_THE_API_SERVER])
def test_the_api_server_rejects(crds_installed: ControlPlane, dry_run_namespace: str, changes: dict[str, Any],
                                expected: list[str]) -> None:
    # A server-side dry run: the schema, its CEL rules and admission decide in full, and an accepted one leaves
    # nothing behind for the next case of the module's one namespace.
    result = kubectl(crds_installed, "create", "--dry-run=server", "-n", dry_run_namespace, "-f", "-",
                     document=changed(WORKFLOW, changes))
    assert result.returncode != 0, f"accepted: {changes}"
    for text in expected:
        assert text in result.stderr, result.stderr
    assert TOKEN not in result.stderr


def test_the_valid_base_workflow_is_accepted(crds_installed: ControlPlane, namespace: str) -> None:
    result = kubectl(crds_installed, "create", "-n", namespace, "-f", "-", document=WORKFLOW)
    assert result.returncode == 0, result.stderr


def test_a_notification_written_with_the_old_name_on_is_still_accepted_and_kept(
    crds_installed: ControlPlane, namespace: str
) -> None:
    # A Workflow stored (or committed) before `on` became `events`: the schema keeps `on`, so it is neither
    # refused nor pruned, and the operator reads it as `events` (tests/unit/validation).
    old = changed(WORKFLOW, {"spec.approvalNotifications": [
        {"on": ["opened"], "action": "notify.slack", "credentials": {"slack": "ops-slack"}}]})
    result = kubectl(crds_installed, "create", "-n", namespace, "-f", "-", document=old)
    assert result.returncode == 0, result.stderr
    stored = get(crds_installed, "workflow", "renewals", namespace)
    assert stored is not None
    assert stored["spec"]["approvalNotifications"] == [
        {"on": ["opened"], "action": "notify.slack", "credentials": {"slack": "ops-slack"}}]


# (case, changes, what the operator's Ready=False message must say): the API server accepts these.
MARKED_NOT_READY_BY_THE_OPERATOR = [
    ("cycle in needs", {"spec.steps[0].needs": ["tell"]},
     "spec.steps[0].needs: needs form a cycle: load -> tell -> review -> load"),
    ("unknown step in needs", {"spec.steps[1].needs": ["lod"]},
     "spec.steps[1].needs[0]: 'lod' is not a step id; did you mean 'load'?"),
    ("bad cron", {"spec.triggers[0].schedule.cron": "61 2 * * *"},
     "spec.triggers[0].schedule.cron: is not valid cron syntax"),
    ("bad time zone", {"spec.triggers[0].schedule.timeZone": "Europe/Berln"},
     "spec.triggers[0].schedule.timeZone: 'Europe/Berln' is not an IANA time zone"),
    ("CEL that does not compile", {"spec.steps[2].when": "steps.load.output.status =="},
     "spec.steps[2].when: CEL does not compile"),
    ("CEL reading a step that is not upstream",
     {"spec.steps[0].with.url": "https://x.example.com/${{ steps.tell.output }}"},
     "spec.steps[0].with.url: reads steps.tell, which is not upstream of this step"),
    ("unknown action", {"spec.steps[2].action": "notify.slak"},
     "spec.steps[2].action: unknown action 'notify.slak'; did you mean 'notify.slack'?"),
    ("connector inputs that do not fit", {"spec.steps[0].with.method": 42},
     "spec.steps[0].with.method: Input should be a valid string"),
    ("credential used but not declared", {"spec.steps[0].with.auth.bearer.credential": "crn"},
     "spec.steps[0].with.auth.bearer.credential: credential 'crn' is not declared"),
    ("token written into inputs", {"spec.steps[0].with.headers": {"Authorization": f"Bearer {TOKEN}"}},
     "spec.steps[0].with.headers.Authorization: looks like a credential written inline"),
    ("param default of the wrong type", {"spec.params[0].default": "seven"},
     "spec.params[0].default: is a string, but the param is declared type: integer"),
    ("egress with host bits", {"spec.steps[0].egress[0].cidr": "203.0.113.7/24"},
     "spec.steps[0].egress[0].cidr: '203.0.113.7/24' has host bits set; did you mean '203.0.113.0/24'?"),
]


def ready_condition(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    workflow = get(plane, "workflows.towline.dev", name, namespace) or {}
    generation = workflow.get("metadata", {}).get("generation")
    for condition in (workflow.get("status") or {}).get("conditions", []):
        if condition["type"] == "Ready" and condition.get("observedGeneration") == generation:
            return dict(condition)
    return None


@pytest.mark.parametrize(("changes", "expected"), [c[1:] for c in MARKED_NOT_READY_BY_THE_OPERATOR],
                         ids=[c[0] for c in MARKED_NOT_READY_BY_THE_OPERATOR])
def test_the_operator_marks_not_ready(towline_installed: ControlPlane, towline_operator: Any, namespace: str,
                                      changes: dict[str, Any], expected: str) -> None:
    plane = towline_installed
    manifest = changed(WORKFLOW, changes)
    result = kubectl(plane, "create", "-n", namespace, "-f", "-", document=manifest)
    assert result.returncode == 0, f"the API server should accept this; it said {result.stderr}"
    condition = wait_for("Ready for the current generation", lambda: ready_condition(plane, namespace, "renewals"))
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSpec"), condition
    assert expected in condition["message"], condition["message"]
    status = (get(plane, "workflows.towline.dev", "renewals", namespace) or {})["status"]
    assert TOKEN not in json.dumps(status), "status must never repeat a credential"


def test_examples_become_ready_and_are_never_written_by_the_operator(
    towline_installed: ControlPlane, towline_operator: Any, namespace: str
) -> None:
    plane = towline_installed
    for path in EXAMPLES:
        assert kubectl(plane, "apply", "-n", namespace, "-f", str(path)).returncode == 0
    names = [document["metadata"]["name"] for path in EXAMPLES for document in yaml.safe_load_all(path.read_text())]
    for name in names:
        condition = wait_for(f"{name} Ready", lambda name=name: ready_condition(plane, namespace, name))
        assert condition["status"] == "True", condition
        workflow = get(plane, "workflows.towline.dev", name, namespace) or {}
        assert workflow["metadata"]["generation"] == 1, "the operator must never write the spec"
        assert "annotations" not in workflow["metadata"] or set(workflow["metadata"]["annotations"]) <= {
            "kubectl.kubernetes.io/last-applied-configuration"}


RUN: dict[str, Any] = {
    "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun", "metadata": {"name": "renewals-by-hand"},
    # No such Workflow: these tests are about the run's own spec, not about running it.
    "spec": {"workflowRef": {"name": "no-such-workflow"}, "params": {"days": 3}, "requestedBy": "admin"},
}


@pytest.fixture
def run(crds_installed: ControlPlane, namespace: str) -> str:
    result = kubectl(crds_installed, "create", "-n", namespace, "-f", "-", document=RUN)
    assert result.returncode == 0, result.stderr
    return "workflowruns.towline.dev/renewals-by-hand"


def patch(plane: ControlPlane, namespace: str, target: str, spec: dict[str, Any]) -> Any:
    return kubectl(plane, "patch", "-n", namespace, target, "--type", "merge", "-p", json.dumps({"spec": spec}))


@pytest.mark.parametrize(("spec", "expected"), [
    ({"params": {"days": 30}}, "spec.params: Invalid value: spec.params is immutable; create a new WorkflowRun"),
    ({"workflowRef": {"name": "other"}}, "spec.workflowRef: Invalid value: spec.workflowRef is immutable"),
    ({"requestedBy": "mallory"}, "spec.requestedBy: Invalid value: spec.requestedBy is immutable"),
    ({"trigger": {"type": "webhook"}}, "spec.trigger: Invalid value: spec.trigger is immutable"),
], ids=["params", "workflowRef", "requestedBy", "trigger"])
def test_a_runs_spec_cannot_be_edited(crds_installed: ControlPlane, namespace: str, run: str,
                                      spec: dict[str, Any], expected: str) -> None:
    result = patch(crds_installed, namespace, run, spec)
    assert result.returncode != 0 and expected in result.stderr, result.stderr


def test_steps_cannot_be_added_to_a_run(crds_installed: ControlPlane, namespace: str, run: str) -> None:
    edited = changed(RUN, {"spec.steps": [{"id": "extra", "action": "http.request"}]})
    result = kubectl(crds_installed, "apply", "-n", namespace, "-f", "-", document=edited)
    assert result.returncode != 0 and 'unknown field "spec.steps"' in result.stderr, result.stderr


def test_a_run_can_be_suspended_and_cancelled_but_not_uncancelled(
    crds_installed: ControlPlane, namespace: str, run: str
) -> None:
    assert patch(crds_installed, namespace, run, {"suspend": True}).returncode == 0
    assert patch(crds_installed, namespace, run, {"cancel": True}).returncode == 0
    result = patch(crds_installed, namespace, run, {"cancel": False})
    assert result.returncode != 0 and "spec.cancel: Invalid value: a cancelled run stays cancelled" in result.stderr


def test_a_runs_status_is_one_field_for_managed_fields_and_still_refuses_a_repeated_step(
    crds_installed: ControlPlane, namespace: str, run: str
) -> None:
    """Only the operator writes status, so the schema makes it atomic: managedFields name `status` once instead
    of every field of every step (a third of a 50-step run's bytes, paid on each status write). The schema
    still refuses two steps with one id."""
    steps = [{"id": "load", "phase": "Succeeded", "attempt": 1, "history": [{"attempt": 1}]},
             {"id": "tell", "phase": "Running", "attempt": 1}]
    status = {"status": {"phase": "Running", "steps": steps}}
    result = kubectl(crds_installed, "patch", "-n", namespace, run, "--subresource", "status", "--type", "merge",
                     "-p", json.dumps(status))
    assert result.returncode == 0, result.stderr
    read = kubectl(crds_installed, "get", "-n", namespace, run, "-o", "json", "--show-managed-fields")
    assert read.returncode == 0, read.stderr
    stored = json.loads(read.stdout)
    assert [step["id"] for step in stored["status"]["steps"]] == ["load", "tell"]
    owned = [entry["fieldsV1"] for entry in stored["metadata"]["managedFields"] if entry.get("subresource") == "status"]
    assert owned == [{"f:status": {}}], owned
    repeated = {"status": {"phase": "Running", "steps": [*steps, {"id": "load", "phase": "Failed"}]}}
    result = kubectl(crds_installed, "patch", "-n", namespace, run, "--subresource", "status", "--type", "merge",
                     "-p", json.dumps(repeated))
    assert result.returncode != 0 and 'status.steps[2]: Duplicate value: {"id":"load"}' \
        in result.stderr, result.stderr


APPROVAL: dict[str, Any] = {
    "apiVersion": "towline.dev/v1alpha1", "kind": "Approval", "metadata": {"name": "renewals-by-hand-review"},
    "spec": {"runName": "renewals-by-hand", "workflowName": "renewals", "step": "review", "message": "Go?",
             "approvers": {"users": ["admin"]}, "requestedBy": "carol", "expiresAt": "2030-01-01T00:00:00Z"},
}


@pytest.fixture
def approval(crds_installed: ControlPlane, namespace: str) -> str:
    # Only the operator creates Approvals (the chart's admission policy insists), so act as it.
    result = kubectl(crds_installed, "create", "-n", namespace, "-f", "-", document=APPROVAL, as_operator=True)
    assert result.returncode == 0, result.stderr
    return "approvals.towline.dev/renewals-by-hand-review"


def test_a_decision_names_who_decided(crds_installed: ControlPlane, namespace: str, approval: str) -> None:
    result = patch(crds_installed, namespace, approval, {"decision": "Approved"})
    assert result.returncode != 0 and "spec.decidedBy: Invalid value: set spec.decidedBy" in result.stderr


@pytest.mark.parametrize(("spec", "expected"), [
    ({"decision": "Rejected"}, "spec.decision: Invalid value: spec.decision cannot change once set"),
    ({"decidedBy": "bob"}, "spec.decidedBy: Invalid value: spec.decidedBy cannot change once set"),
    ({"reason": "second thoughts"}, "spec.reason: Invalid value: spec.reason cannot change after the decision"),
    ({"decision": None, "decidedBy": None}, "spec.decision cannot change once set"),
], ids=["decision", "decidedBy", "reason", "withdrawn"])
def test_a_decided_approval_cannot_change(crds_installed: ControlPlane, namespace: str, approval: str,
                                          spec: dict[str, Any], expected: str) -> None:
    decided = patch(crds_installed, namespace, approval,
                    {"decision": "Approved", "decidedBy": "admin", "reason": "numbers look right"})
    assert decided.returncode == 0, decided.stderr
    result = patch(crds_installed, namespace, approval, spec)
    assert result.returncode != 0 and expected in result.stderr, result.stderr


@pytest.mark.parametrize("field", ["message", "expiresAt", "approvers", "step"])
def test_an_approvals_gate_cannot_be_edited(crds_installed: ControlPlane, namespace: str, approval: str,
                                            field: str) -> None:
    value = {"message": "Go now?", "expiresAt": "2031-01-01T00:00:00Z", "approvers": {"users": ["mallory"]},
             "step": "tell"}[field]
    result = patch(crds_installed, namespace, approval, {field: value})
    assert result.returncode != 0 and f"spec.{field}: Invalid value: spec.{field} is immutable" in result.stderr
