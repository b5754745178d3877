"""A replaying sender: one captured delivery, resent with fresh unsigned headers, starts one run.

The attacker holds one genuine signed delivery (a repository admin can copy one
from GitHub's "Recent Deliveries"; anyone on the path can record one) but not
the signing secret. What the signature does not cover they may change at will;
the ingress names the run only from what it does cover.
"""

from __future__ import annotations

import uuid

import pytest
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
    standard_webhook,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.support import apply

from towline.triggers.ingress import sign
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

RELEASE = b'{"action": "published", "release": {"tag_name": "v1.0.0"}}'


def test_a_github_delivery_resent_with_fresh_delivery_ids_starts_one_run(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str,
) -> None:
    secret = uuid.uuid4().hex
    create_secret(towline_installed, namespace, "gh", {"secret": secret})
    opt_in(towline_installed, namespace, "gh")
    apply(towline_installed, webhook_workflow("deploy", namespace, {"verify": {
        "scheme": "github", "secretRef": {"name": "gh", "key": "secret"}}, "rateLimitPerMinute": 100}))
    wait_until_cached(ingress, namespace, "deploy")
    captured = sign.github_headers(secret.encode(), RELEASE, str(uuid.uuid4()))

    url = hook_url(ingress, namespace, "deploy")
    answers = [post(url, RELEASE, {"Content-Type": "application/json", **captured})]
    for _ in range(2):
        replay = {"Content-Type": "application/json", **captured, "X-GitHub-Delivery": str(uuid.uuid4())}
        answers.append(post(url, RELEASE, replay))

    assert [a.status_code for a in answers] == [202, 200, 200], [a.text for a in answers]
    assert len({refusal(a)["run"] for a in answers}) == 1
    (run,) = runs(towline_installed, namespace)
    assert run["spec"]["trigger"]["deliveryId"] == captured["X-GitHub-Delivery"], "the first delivery's id is kept"


def test_a_standard_webhook_resent_with_fresh_configured_delivery_headers_starts_one_run(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str,
) -> None:
    secret = new_whsec()
    create_secret(towline_installed, namespace, "hook-secret", {"signing-secret": secret})
    opt_in(towline_installed, namespace, "hook-secret")
    webhook = standard_webhook(deliveryId={"header": "X-Event-Id"}, rateLimitPerMinute=100)
    apply(towline_installed, webhook_workflow("orders", namespace, webhook))
    wait_until_cached(ingress, namespace, "orders")
    captured = signed_standard(secret, RELEASE, delivery_id="msg_captured")

    answers = [post(hook_url(ingress, namespace, "orders"), RELEASE, {**captured, "X-Event-Id": f"evt-{n}"})
               for n in range(3)]

    assert [a.status_code for a in answers] == [202, 200, 200], [a.text for a in answers]
    assert len(runs(towline_installed, namespace)) == 1
