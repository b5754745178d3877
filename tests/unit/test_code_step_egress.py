"""A code step that connects anywhere must list allowHosts: its own sockets do not pass the SSRF guard, so an
empty allowlist ("any public host") would open its ports to the whole internet. Refused at three places:
validation (Workflow not Ready), the engine (the step fails before its Job), the Job builder (ports stay closed)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.engine.engine_harness import Sim, workflow

from towline.engine.actions import CreateStepJob
from towline.k8s.actions import ActionContext, DefaultDenyPolicies, apply_actions
from towline.k8s.objects import RunRef, StepPodSettings, build_default_deny_policy
from towline.validation import validate_workflow_manifest
from towline.validation.catalog import connector_catalog

PYTHON = {"source": "def main(inputs):\n    return 1\n", "ports": [443]}
WASM_URL = {"module": {"url": "https://modules.example.com/m.wasm", "sha256": "0" * 64}}
RUN = RunRef(name="r", namespace="team", uid="uid-1", workflow="wf")


def errors_of(step: dict[str, Any]) -> dict[str, str]:
    _, errors = validate_workflow_manifest({"steps": [{"id": "code", **step}]}, connector_catalog())
    return {error.field: error.message for error in errors}


def test_a_python_step_with_ports_and_no_allow_hosts_is_refused_with_the_field_and_the_fix() -> None:
    errors = errors_of({"action": "code.python", "with": PYTHON})
    message = errors.pop("spec.steps[0].allowHosts")
    assert errors == {}
    assert "code.python step asks for network access (with.ports) but lists no allowHosts" in message
    assert "allowHosts: [api.example.com]" in message
    assert errors_of({"action": "code.python", "with": PYTHON, "allowHosts": ["203.0.113.5"]}) == {}
    assert errors_of({"action": "code.python", "with": {"source": PYTHON["source"]}}) == {}


def test_a_wasm_step_fetching_its_module_from_a_url_needs_allow_hosts_and_a_config_map_one_does_not() -> None:
    errors = errors_of({"action": "code.wasm", "with": WASM_URL})
    assert "code.wasm step fetches its module from a URL but lists no allowHosts" in errors["spec.steps[0].allowHosts"]
    assert errors_of({"action": "code.wasm", "with": WASM_URL, "allowHosts": ["modules.example.com"]}) == {}
    assert errors_of({"action": "code.wasm", "with": {"module": {"configMap": {"name": "m", "key": "k"}}}}) == {}


def test_the_engine_fails_such_a_step_before_its_job_exists() -> None:
    sim = Sim(workflow([{"id": "code", "action": "code.python", "with": PYTHON}]), catalog=connector_catalog())
    sim.reconcile()
    step = sim.step("code")
    assert sim.created == [] and step.phase == "Failed" and step.error_class == "validation"
    assert step.message is not None and step.message.startswith("allowHosts: this code.python step asks for")
    allowed = Sim(workflow([{"id": "code", "action": "code.python", "with": PYTHON, "allowHosts": ["203.0.113.5"]}]),
                  catalog=connector_catalog())
    allowed.reconcile()
    assert allowed.created[0].allow_hosts == ("203.0.113.5",)


class RecordingApi:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        self.created.append(body)
        owners = body["metadata"]["ownerReferences"] if body["kind"] == "Pod" else [RUN.owner_reference()]
        return {**body, "metadata": {**body["metadata"], "uid": "job-uid", "ownerReferences": owners}}, True


def egress_rules(action: str, allow_hosts: tuple[str, ...]) -> list[dict[str, Any]]:
    known = DefaultDenyPolicies()
    intact = build_default_deny_policy(RUN.namespace)
    intact["metadata"]["resourceVersion"] = "1"
    known.saw(intact)
    api = RecordingApi()
    catalog = connector_catalog()
    context = ActionContext(api=api, pod_settings=StepPodSettings(),  # type: ignore[arg-type]
                            catalog=catalog, default_deny=known)
    job = CreateStepJob(step_id="code", attempt=1, job_name="r-code-1", action=action, inputs=PYTHON,
                        credentials={}, egress=(), allow_private_networks=(), allow_hosts=allow_hosts,
                        timeout_seconds=None, idempotency_key="k", mutating=True)
    asyncio.run(apply_actions(context, RUN, [job]))
    (policy,) = [body for body in api.created if body["kind"] == "NetworkPolicy"]
    rules: list[dict[str, Any]] = policy["spec"]["egress"]
    return [rule for rule in rules if {"protocol": "TCP", "port": 443} in rule.get("ports", [])]


def test_the_job_builder_never_opens_a_code_steps_ports_without_allow_hosts() -> None:
    assert egress_rules("code.python", ()) == []
    (pinned,) = egress_rules("code.python", ("203.0.113.5",))
    assert pinned["to"] == [{"ipBlock": {"cidr": "203.0.113.5/32"}}]
