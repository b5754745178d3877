"""Each example's webhook trigger fires exactly once, end to end, for a correctly signed delivery.

The example is applied as shipped; its signing Secret is created and granted
to the ingress the way the example's header says; the delivery is signed as the
real sender signs it; the operator then picks the run up.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.ingress_support import (
    create_secret,
    hook_url,
    ingress,
    new_whsec,
    opt_in,
    post,
    refusal,
    runs,
    signed_standard,
    wait_until_cached,
)
from tests.integration.support import apply, get, wait_for

from towline.triggers.ingress import sign
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess
from towline_dev.install import OperatorProcess

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass(frozen=True)
class Delivery:
    example: str
    body: dict[str, Any]
    expected_data: dict[str, Any]
    github_event: str | None = None


DELIVERIES = [
    Delivery("webhook-deploy-with-approval.yaml",
             {"action": "published", "release": {"tag_name": "v1.4.0", "body": "notes"}, "sender": {"login": "dev"}},
             {"tag": "v1.4.0"}, github_event="release"),
    Delivery("order-fulfilment-with-compensation.yaml",
             {"type": "order.paid", "timestamp": "2026-11-30T10:00:00Z", "data": {"id": "A-1001", "total": 99.5}},
             {"order_id": "A-1001"}),
    Delivery("ai-ticket-triage.yaml",
             {"type": "ticket.created", "data": {"id": 42, "subject": "Login fails", "body": "Since 9am", "vip": True}},
             {"ticket": {"id": "42", "subject": "Login fails", "body": "Since 9am"}}),
]


def webhook_triggers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in manifest["spec"].get("triggers", []) if "webhook" in t]


def test_every_example_webhook_trigger_is_covered() -> None:
    """Every Workflow of every example file (a file may hold several: a subflow and its callers)."""
    with_webhooks = {p.name for p in EXAMPLES.glob("*.yaml")
                     for manifest in yaml.safe_load_all(p.read_text())
                     if manifest and manifest.get("kind") == "Workflow" and webhook_triggers(manifest)}
    assert with_webhooks == {d.example for d in DELIVERIES}


@pytest.mark.parametrize("delivery", DELIVERIES, ids=lambda d: d.example.removesuffix(".yaml"))
def test_example_webhook_trigger_fires_once(
    towline_installed: ControlPlane, towline_operator: OperatorProcess, ingress: IngressProcess, namespace: str,
    delivery: Delivery,
) -> None:
    manifest = yaml.safe_load((EXAMPLES / delivery.example).read_text())
    manifest["metadata"]["namespace"] = namespace
    (trigger,) = webhook_triggers(manifest)
    verify = trigger["webhook"]["verify"]
    ref = verify["secretRef"]
    scheme = verify["scheme"]
    secret = new_whsec() if scheme == "standard-webhooks" else uuid.uuid4().hex
    create_secret(towline_installed, namespace, ref["name"], {ref["key"]: secret})
    opt_in(towline_installed, namespace, ref["name"])
    apply(towline_installed, manifest)
    workflow = manifest["metadata"]["name"]
    wait_until_cached(ingress, namespace, workflow, trigger["name"])
    url = hook_url(ingress, namespace, workflow, trigger["name"])

    body = json.dumps(delivery.body).encode()
    delivery_id = str(uuid.uuid4())
    if scheme == "github":
        headers = {"Content-Type": "application/json", "X-GitHub-Event": delivery.github_event or "",
                   **sign.github_headers(secret.encode(), body, delivery_id)}
    else:
        headers = signed_standard(secret, body, delivery_id=delivery_id)
    first = post(url, body, headers)
    assert first.status_code == 202, first.text
    again = post(url, body, headers)
    assert again.status_code == 200, again.text
    name = refusal(first)["run"]
    assert refusal(again)["run"] == name

    (run,) = runs(towline_installed, namespace)
    assert run["metadata"]["name"] == name
    assert run["spec"]["trigger"] == {"type": "webhook", "name": trigger["name"], "deliveryId": delivery_id,
                                      "data": delivery.expected_data}

    def taken() -> str | None:
        current = get(towline_installed, "workflowruns.towline.dev", name, namespace)
        return ((current or {}).get("status") or {}).get("phase")

    wait_for(f"the operator to take up {name}", taken, timeout=120)
