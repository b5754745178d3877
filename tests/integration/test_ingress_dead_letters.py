"""The ingress's dead letters, through the real ingress and API server: a signed delivery the filter refuses is
kept (redacted, in its namespace), listed by an admin, replayed once as one run that names who replayed it; a
person without the admin role can neither read nor replay; a forged replayed-by annotation is refused at create."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.ingress_support import (
    another_namespace,
    create_secret,
    hook_url,
    ingress,
    opt_in,
    post,
    refusal,
    runs,
    signed_standard,
    standard_webhook,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.letterssupport import username
from tests.integration.pluginsupport import ok, towline
from tests.integration.support import apply, bind_role, create

from towline.k8s.deliveryletters import DELIVERY_LETTERS_CONFIG_MAP, REPLAY_OF_ANNOTATION, REPLAYED_BY_ANNOTATION
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess
from towline_dev.install import OPERATOR_NAMESPACE
from towline_dev.release import INGRESS_SERVICE_ACCOUNT

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

CANARY_KEY = "whsec_Y2FuYXJ5LWRlYWQtbGV0dGVyLWtleS0wMTIzNDU2Nzg5"
"""The trigger's signing key: it must never reach the store (the redactor knows it; no signature header is kept)."""
REFUSED_BODY = {"type": "order.refunded", "data": {"id": "A-7", "total": 3.5}, "note": CANARY_KEY}
"""A body the filter refuses, carrying the signing key itself (a sender that echoes its configuration)."""
REFUSED = json.dumps(REFUSED_BODY).encode()


def listed(cluster: ControlPlane, namespace: str, user: str = "admin") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(ok(towline(cluster, namespace, "deadletters", "-o", "json",
                                                        user=user)))["items"]
    return [item for item in items if item.get("kind") == "delivery"]


def orders(cluster: ControlPlane, ingress: IngressProcess, namespace: str) -> str:
    create_secret(cluster, namespace, "shop-webhook", {"signing-secret": CANARY_KEY})
    opt_in(cluster, namespace, "shop-webhook")
    webhook = standard_webhook("shop-webhook", rateLimitPerMinute=1000, filter="body.type == 'order.paid'",
                               data={"order_id": "body.data.id", "total": "body.data.total"})
    apply(cluster, webhook_workflow("orders", namespace, webhook, trigger="order_paid"))
    wait_until_cached(ingress, namespace, "orders", "order_paid")
    return hook_url(ingress, namespace, "orders", "order_paid")


def test_a_filtered_delivery_is_kept_and_replayed_once_by_an_admin(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    cluster = towline_installed
    url = orders(cluster, ingress, namespace)
    response = post(url, REFUSED, signed_standard(CANARY_KEY, REFUSED, delivery_id="msg_refunded"))
    assert response.status_code == 202 and refusal(response)["run"] is None, response.text

    store = cluster.kubectl("get", "configmap", DELIVERY_LETTERS_CONFIG_MAP, "-n", namespace, "-o", "json").stdout
    for secret_text in (CANARY_KEY, CANARY_KEY.removeprefix("whsec_"), "webhook-signature", "v1,"):
        assert secret_text not in store, f"{secret_text!r} is in the dead-letter store"
    [letter] = listed(cluster, namespace)
    assert (letter["workflow"], letter["trigger"], letter["reason"]) == ("orders", "order_paid", "Filtered")
    assert letter["payload"] == {**REFUSED_BODY, "note": "[REDACTED]"}
    assert letter["data"] == {"order_id": "A-7", "total": 3.5}
    assert letter["replayedBy"] is None
    assert runs(cluster, namespace) == [], "a filtered delivery starts no run"

    replayed = ok(towline(cluster, namespace, "deadletters", "replay", letter["id"], user="admin"))
    admin = username(cluster, "admin")
    [run] = runs(cluster, namespace)
    assert run["metadata"]["name"] in replayed
    annotations = run["metadata"]["annotations"]
    assert annotations[REPLAYED_BY_ANNOTATION] == admin
    assert annotations[REPLAY_OF_ANNOTATION] == f"{DELIVERY_LETTERS_CONFIG_MAP}/{letter['id']}"
    assert run["spec"]["requestedBy"] == admin
    assert run["spec"]["trigger"] == {"type": "webhook", "name": "order_paid", "data": {"order_id": "A-7",
                                                                                        "total": 3.5}}
    [marked] = listed(cluster, namespace)
    assert (marked["replayedBy"], marked["replayRun"]) == (admin, run["metadata"]["name"])

    again = towline(cluster, namespace, "deadletters", "replay", letter["id"], user="admin")
    assert again.returncode != 0 and run["metadata"]["name"] in again.stderr, again.stderr
    assert len(runs(cluster, namespace)) == 1, "a second replay starts no run"


def test_a_runner_can_neither_read_nor_replay_nor_forge_a_replay(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    cluster = towline_installed
    url = orders(cluster, ingress, namespace)
    post(url, REFUSED, signed_standard(CANARY_KEY, REFUSED, delivery_id="msg_refunded_2"))
    [letter] = listed(cluster, namespace)
    with another_namespace(cluster, namespace, "carol") as own:
        bind_role(cluster, own, "towline-runner", users=("carol",))
        bind_role(cluster, namespace, "towline-runner", users=("carol",))  # even a runner of the letters' namespace
        read = towline(cluster, namespace, "deadletters", "-o", "json", user="carol")
        assert read.returncode != 0 and "forbidden" in read.stderr.lower(), read.stderr
        replay = towline(cluster, namespace, "deadletters", "replay", letter["id"], user="carol")
        assert replay.returncode != 0 and "forbidden" in replay.stderr.lower(), replay.stderr

        # Straight at the API server, as carol (a runner: she may create runs): a run she starts herself, marked
        # as replayed by the admin, or by her without the replay verb, is refused by the admission policy.
        apply(cluster, webhook_workflow("orders", own, standard_webhook("shop-webhook"), trigger="order_paid"))
        for named in (username(cluster, "admin"), username(cluster, "carol")):
            forged = {
                "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                "metadata": {"name": "forged", "namespace": own,
                             "annotations": {REPLAYED_BY_ANNOTATION: named,
                                             REPLAY_OF_ANNOTATION: f"{DELIVERY_LETTERS_CONFIG_MAP}/{letter['id']}"}},
                "spec": {"workflowRef": {"name": "orders"}, "requestedBy": username(cluster, "carol")},
            }
            refused = create(cluster, forged, user="carol", check=False)
            assert refused.returncode != 0, f"carol created a run marked as replayed by {named}"
            assert "replayed-by" in refused.stderr or "may not replay" in refused.stderr, refused.stderr
        assert runs(cluster, own) == []
    assert len(listed(cluster, namespace)) == 1 and runs(cluster, namespace) == []


def test_the_ingress_may_create_its_dead_letters_and_no_other_config_map(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    """RBAC cannot narrow the ingress's create to a name; the admission policy does."""
    cluster = towline_installed
    as_ingress = ("--as", f"system:serviceaccount:{OPERATOR_NAMESPACE}:{INGRESS_SERVICE_ACCOUNT}")
    other = cluster.kubectl("create", "configmap", "app-settings", "-n", namespace, "--from-literal=mode=evil",
                            *as_ingress, check=False)
    assert other.returncode != 0 and DELIVERY_LETTERS_CONFIG_MAP in other.stderr, other.stderr
    own = cluster.kubectl("create", "configmap", DELIVERY_LETTERS_CONFIG_MAP, "-n", namespace, *as_ingress,
                          check=False)
    assert own.returncode == 0, own.stderr


def test_a_suspended_workflows_delivery_and_a_too_large_bearer_body_are_kept_and_an_unsigned_one_is_not(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    cluster = towline_installed
    token = "bearer-canary-token-of-32-bytes!"
    create_secret(cluster, namespace, "keys", {"signing-secret": CANARY_KEY, "token": token})
    opt_in(cluster, namespace, "keys")
    apply(cluster, webhook_workflow("paused", namespace, standard_webhook("keys"), suspend=True))
    apply(cluster, webhook_workflow("big", namespace, {
        "verify": {"scheme": "bearer", "secretRef": {"name": "keys", "key": "token"}}, "maxBodyBytes": 1024}))
    wait_until_cached(ingress, namespace, "paused")
    wait_until_cached(ingress, namespace, "big")

    unsigned = post(hook_url(ingress, namespace, "paused"), REFUSED, {"Content-Type": "application/json"})
    assert unsigned.status_code == 401, unsigned.text
    paused = post(hook_url(ingress, namespace, "paused"), REFUSED, signed_standard(CANARY_KEY, REFUSED))
    assert paused.status_code == 409, paused.text
    big = b'{"pad": "' + b"x" * 2000 + b'"}'
    too_large = post(hook_url(ingress, namespace, "big"), big,
                     {"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    assert too_large.status_code == 413, too_large.text

    letters = {letter["workflow"]: letter for letter in listed(cluster, namespace)}
    assert set(letters) == {"paused", "big"}, "the unsigned delivery is not kept"
    assert letters["paused"]["reason"] == "Suspended" and letters["paused"]["data"] == {}
    assert (letters["big"]["reason"], letters["big"]["size"], letters["big"]["payload"]) == \
        ("BodyTooLarge", len(big), None)
    assert "authorization" not in letters["big"]["headers"]
    store = cluster.kubectl("get", "configmap", DELIVERY_LETTERS_CONFIG_MAP, "-n", namespace, "-o", "json").stdout
    assert token not in store and CANARY_KEY not in store and "xxxxxxxx" not in store
