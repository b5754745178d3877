"""The Jobs and egress policies the operator creates for each step kind, pinned field by field.

Each kind (a built-in action, a code step, a user step type, an approval notification) goes through
`apply_actions` as a pass carries it out, against an API that records what it is asked to create. What it
creates must equal the golden file in tests/unit/k8s/golden/ field by field; a difference lists every path
that changed. A change to a step pod that is meant is made by regenerating the file
(`TOWLINE_UPDATE_GOLDEN=1 pytest tests/unit/k8s/test_k8s_step_pod_golden.py`) and reviewing its diff.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.engine.actions import Action, CreateNotificationJob, CreateStepJob
from towline.k8s import actions as k8s_actions
from towline.k8s.actions import ActionContext, DefaultDenyPolicies, apply_actions
from towline.k8s.objects import RunRef, StepPodSettings, build_default_deny_policy
from towline.validation.catalog import connector_catalog

GOLDEN = Path(__file__).parent / "golden" / "step_pods.json"
RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")
NOW = datetime(2026, 3, 1, 8, 0, 0, tzinfo=UTC)
SETTINGS = StepPodSettings(
    image="localhost/towline-runner:dev", ttl_seconds_after_finished=600, default_timeout_seconds=120,
    extra_env={"TOWLINE_LOG_LEVEL": "debug"}, cluster_cidrs=("10.244.0.0/16", "10.96.0.0/12"),
    isolation_probe="10.96.0.1:443", image_pull_secrets=("runner-pull",), node_selector={"pool": "steps"},
    tolerations=({"key": "steps", "operator": "Exists", "effect": "NoSchedule"},),
    labels={"cost-center": "ops-42"}, priority_class_name="towline-steps",
    affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["steps"]}]}}]}},
)
STEP_TYPE = ResolvedStepType(kind="StepType", name="deploy", spec=StepTypeSpec.model_validate({
    "image": "registry.example.com/team/deploy:1.4.0",
    "command": ["/deploy"], "args": ["--verbose"],
    "credentials": [{"name": "api", "keys": ["token", "ca.crt"]}, {"name": "unused", "keys": ["x"]}],
    "resources": {"limits": {"memory": "128Mi", "cpu": "500m"}},
    "egress": {"ports": [8443, 443]},
    "imagePullSecrets": ["deploy-pull"],
    "timeoutSeconds": 90,
}))


def step(step_id: str, action: str, inputs: dict[str, Any], **changes: Any) -> CreateStepJob:
    arguments: dict[str, Any] = {
        "step_id": step_id, "attempt": 2, "job_name": f"towline-step-r-1-{step_id.replace('_', '-')}-2",
        "action": action, "inputs": inputs, "credentials": {}, "egress": (), "allow_private_networks": (),
        "allow_hosts": (), "timeout_seconds": None, "idempotency_key": f"idem-{step_id}", "mutating": False, **changes,
    }
    return CreateStepJob(**arguments)


KINDS: dict[str, Action] = {
    "action": step(
        "load_accounts", "http.request",
        {"url": "https://crm.example.com/api", "auth": {"bearer": {"credential": "crm", "key": "token"}}},
        credentials={"crm": "crm-api", "spare": "spare-secret"},
        egress=({"cidr": "203.0.113.0/24", "ports": [443]}, {"cidr": "10.0.0.0/8"}),
        allow_private_networks=("10.20.0.0/16",), allow_hosts=("crm.example.com",), timeout_seconds=45,
        mutating=True,
    ),
    "code": step(
        "enrich", "code.python",
        {"source": "def main(inputs):\n    return inputs\n", "memory": "256Mi", "cpu": "500m"},
        allow_hosts=("203.0.113.7",),
    ),
    "wasm": step("score", "code.wasm", {"module": {"configMap": {"name": "mods", "key": "score.wasm"}}}),
    "step_type": step(
        "roll", "steptype/deploy", {"replicas": 2}, credentials={"api": "deploy-token"},
        allow_hosts=("deploy.example.com",), step_type=STEP_TYPE,
    ),
    "notification": CreateNotificationJob(
        step_id="review", event="opened", index=1, job_name="towline-step-r-1-review-opened-1",
        action="webhook.send", inputs={"url": "https://hooks.example.com/a", "payload": {"text": "hi"}},
        credentials={"webhook": "approvals-hook"}, allow_hosts=("hooks.example.com",), idempotency_key="tl-k",
    ),
}


class RecordingApi:
    """Records every object it is asked to create, by kind and name, and answers as the API server would."""

    def __init__(self) -> None:
        self.created: dict[str, dict[str, Any]] = {}

    async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        self.created[f"{body['kind']} {body['metadata']['name']}"] = json.loads(json.dumps(body))
        owners = body["metadata"].get("ownerReferences") or [RUN.owner_reference()]
        return {**body, "metadata": {**body["metadata"], "uid": "job-uid", "ownerReferences": owners}}, True


class FixedClock(datetime):
    @classmethod
    def now(cls, tz: Any = None) -> FixedClock:
        return cls.fromtimestamp(NOW.timestamp(), tz)


def created_for(action: Action, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """The Jobs and NetworkPolicies a pass creates for `action` (the default-deny policy is already in place)."""
    monkeypatch.setattr(k8s_actions, "datetime", FixedClock)
    api = RecordingApi()
    known = DefaultDenyPolicies()
    known.saw(build_default_deny_policy(RUN.namespace))
    context = ActionContext(
        api=api, pod_settings=SETTINGS, catalog=connector_catalog(),  # type: ignore[arg-type]
        api_server_networks=lambda: ("192.0.2.10/32",), default_deny=known,
    )
    asyncio.run(apply_actions(context, RUN, [action]))
    return {key: body for key, body in api.created.items() if not key.startswith("Pod ")}


def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Every path at which `actual` differs from `expected`, with both values."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        found: list[str] = []
        for key in sorted(set(expected) | set(actual), key=str):
            where = f"{path}.{key}"
            if key not in actual:
                found.append(f"{where}: missing (expected {json.dumps(expected[key])})")
            elif key not in expected:
                found.append(f"{where}: unexpected {json.dumps(actual[key])}")
            else:
                found.extend(differences(expected[key], actual[key], where))
        return found
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [line for index, (e, a) in enumerate(zip(expected, actual, strict=True))
                for line in differences(e, a, f"{path}[{index}]")]
    if expected != actual or type(expected) is not type(actual):
        return [f"{path}: expected {json.dumps(expected)}, got {json.dumps(actual)}"]
    return []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_step_kind_creates_the_pinned_job_and_egress_policy(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    created = created_for(KINDS[kind], monkeypatch)
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("TOWLINE_UPDATE_GOLDEN") == "1":
        golden[kind] = created
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    assert sorted(created) == sorted(golden[kind]), "a different set of objects was created"
    found = differences(golden[kind], created)
    assert not found, f"{kind}: the created objects differ from {GOLDEN.name}:\n" + "\n".join(found)
