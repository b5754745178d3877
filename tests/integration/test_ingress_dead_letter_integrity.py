"""The ingress's dead letters kept as it wrote them, and counted, through the real ingress and API server.

A namespace editor (the built-in `edit` role: update and delete on its ConfigMaps) can neither change a letter's
data, nor add a forged letter or replay mark, nor remove letters or the store (policy towline-dead-letters), so
a replay starts its run from what the ingress verified; an admin's replay still marks the letter. The ingress
reads the stores of every namespace by list and watch with the field selector on their one name, and no other
ConfigMap; its gauges follow a refused delivery, a replay and a dismissal.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.ingress_support import (
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
from tests.integration.pluginsupport import ok, towline
from tests.integration.support import apply, bind_role, wait_for

from towline.k8s.deliveryletters import DELIVERY_LETTERS_CONFIG_MAP, mark_key
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess
from towline_dev.install import OPERATOR_NAMESPACE
from towline_dev.release import INGRESS_SERVICE_ACCOUNT

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

KEY = "whsec_aW50ZWdyaXR5LWRlYWQtbGV0dGVyLWtleS0wMTIzNDU="
REFUSED = json.dumps({"type": "order.refunded", "data": {"id": "A-7", "total": 3.5}}).encode()
"""A body the trigger's filter refuses: kept as a dead letter."""
AS_INGRESS = ("--as", f"system:serviceaccount:{OPERATOR_NAMESPACE}:{INGRESS_SERVICE_ACCOUNT}")


def orders(cluster: ControlPlane, ingress: IngressProcess, namespace: str) -> str:
    create_secret(cluster, namespace, "shop-webhook", {"signing-secret": KEY})
    opt_in(cluster, namespace, "shop-webhook")
    webhook = standard_webhook("shop-webhook", rateLimitPerMinute=1000, filter="body.type == 'order.paid'",
                               data={"order_id": "body.data.id", "total": "body.data.total"})
    apply(cluster, webhook_workflow("orders", namespace, webhook, trigger="order_paid"))
    wait_until_cached(ingress, namespace, "orders", "order_paid")
    return hook_url(ingress, namespace, "orders", "order_paid")


def refuse(url: str, delivery_id: str, order: str = "A-7") -> None:
    body = REFUSED.replace(b"A-7", order.encode())
    response = post(url, body, signed_standard(KEY, body, delivery_id=delivery_id))
    assert response.status_code == 202 and refusal(response)["run"] is None, response.text


def store(cluster: ControlPlane, namespace: str) -> dict[str, str]:
    config_map = json.loads(cluster.kubectl("get", "configmap", DELIVERY_LETTERS_CONFIG_MAP, "-n", namespace,
                                            "-o", "json").stdout)
    data: dict[str, str] = config_map.get("data") or {}
    return data


def patch(cluster: ControlPlane, namespace: str, operations: list[dict[str, Any]],
          user: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("patch", "configmap", DELIVERY_LETTERS_CONFIG_MAP, "-n", namespace, "--type", "json",
                           "-p", json.dumps(operations), user=user, check=False)


def gauges(ingress: IngressProcess, namespace: str) -> dict[tuple[str, str], float]:
    """(metric, reason) -> value of the ingress's dead-letter gauges for one namespace."""
    text = httpx.get(f"{ingress.admin_url}/metrics", timeout=5).text
    return {(sample.name, sample.labels["reason"]): sample.value
            for family in text_string_to_metric_families(text) if family.name.startswith("towline_webhook_dead_let")
            for sample in family.samples if sample.labels.get("namespace") == namespace}


def test_a_namespace_editor_can_neither_change_nor_forge_nor_remove_a_dead_letter(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    cluster = towline_installed
    bind_role(cluster, namespace, "edit", users=("alice",))
    url = orders(cluster, ingress, namespace)

    forged_store = cluster.kubectl("create", "configmap", DELIVERY_LETTERS_CONFIG_MAP, "-n", namespace,
                                   "--from-literal=forged={}", user="alice", check=False)
    assert forged_store.returncode != 0 and "only the ingress creates it" in forged_store.stderr, forged_store.stderr

    refuse(url, "msg_integrity")
    kept = store(cluster, namespace)
    [letter_id] = kept
    tampered = json.loads(kept[letter_id])
    tampered["data"] = {"order_id": "A-7", "total": 35000}

    changed = patch(cluster, namespace, [{"op": "replace", "path": f"/data/{letter_id}",
                                          "value": json.dumps(tampered)}], user="alice")
    assert changed.returncode != 0, "alice changed the letter's data"
    assert f"may not add or change dead letter {letter_id}" in changed.stderr, changed.stderr
    added = patch(cluster, namespace, [{"op": "add", "path": "/data/forged0000000000000",
                                        "value": json.dumps({**tampered, "id": "forged0000000000000"})}],
                  user="alice")
    assert added.returncode != 0 and "may not add or change dead letter forged0000000000000" in added.stderr, \
        added.stderr
    marked = patch(cluster, namespace, [{"op": "add", "path": f"/data/{mark_key(letter_id)}",
                                         "value": '{"replayRun":"x","replayedBy":"alice"}'}], user="alice")
    assert marked.returncode != 0 and "takes the replay verb" in marked.stderr, marked.stderr
    removed = patch(cluster, namespace, [{"op": "remove", "path": f"/data/{letter_id}"}], user="alice")
    assert removed.returncode != 0 and "may not remove dead letters" in removed.stderr, removed.stderr
    deleted = cluster.kubectl("delete", "configmap", DELIVERY_LETTERS_CONFIG_MAP, "-n", namespace, user="alice",
                              check=False)
    assert deleted.returncode != 0 and "deleting ConfigMap towline-dead-letters" in deleted.stderr, deleted.stderr
    collection = f"/api/v1/namespaces/{namespace}/configmaps?labelSelector={quote('app.kubernetes.io/part-of=towline')}"
    emptied = cluster.kubectl("delete", "--raw", collection, user="alice", check=False)  # one DELETECOLLECTION
    assert emptied.returncode != 0 and "may not remove dead letters" in emptied.stderr, emptied.stderr
    assert store(cluster, namespace) == kept, "the store is as the ingress wrote it"

    # The admin's replay starts the run from the data the ingress verified, and marks the letter beside it.
    ok(towline(cluster, namespace, "deadletters", "replay", letter_id, user="admin"))
    [run] = runs(cluster, namespace)
    assert run["spec"]["trigger"]["data"] == {"order_id": "A-7", "total": 3.5}
    after = store(cluster, namespace)
    assert after[letter_id] == kept[letter_id]
    assert json.loads(after[mark_key(letter_id)])["replayRun"] == run["metadata"]["name"]


def test_the_policy_decides_within_its_cost_budget_on_a_full_store(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    """A store near a ConfigMap's 1 MiB (200 letters of 5 KB, as the ingress keeps them at most): an admin's mark
    is admitted and an editor's change refused by its rule, not by CEL's cost limit."""
    cluster = towline_installed
    bind_role(cluster, namespace, "edit", users=("alice",))
    letters = {f"{number:020x}": json.dumps({"id": f"{number:020x}", "pad": "x" * 5000}) for number in range(200)}
    full = {"apiVersion": "v1", "kind": "ConfigMap", "data": letters,
            "metadata": {"name": DELIVERY_LETTERS_CONFIG_MAP, "namespace": namespace}}
    cluster.kubectl("create", "-f", "-", *AS_INGRESS, stdin=json.dumps(full))
    first = f"{0:020x}"
    admin = cluster.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    marked = patch(cluster, namespace, [{"op": "add", "path": f"/data/{mark_key(first)}",
                                         "value": json.dumps({"replayRun": "r", "replayedBy": admin},
                                                             separators=(",", ":"))}], user="admin")
    assert marked.returncode == 0, marked.stderr
    changed = patch(cluster, namespace, [{"op": "replace", "path": f"/data/{first}", "value": "{}"}], user="alice")
    assert changed.returncode != 0 and f"may not add or change dead letter {first}" in changed.stderr, changed.stderr


def test_the_ingress_may_list_and_watch_the_dead_letter_stores_and_no_other_config_map(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    """RBAC authorizes a list or watch by resourceNames only with the field selector on that one name."""
    cluster = towline_installed
    selector = f"metadata.name={DELIVERY_LETTERS_CONFIG_MAP}"
    listed = cluster.kubectl("get", "configmaps", "-A", "--field-selector", selector, *AS_INGRESS, check=False)
    assert listed.returncode == 0, listed.stderr
    watch = f"/api/v1/configmaps?fieldSelector={quote(selector)}&watch=true&timeoutSeconds=1"
    watched = cluster.kubectl("get", "--raw", watch, *AS_INGRESS, check=False)
    assert watched.returncode == 0, watched.stderr

    for refused in (
        ("get", "configmaps", "-A"),
        ("get", "configmaps", "-n", namespace),
        ("get", "configmaps", "-A", "--field-selector", "metadata.name=kube-root-ca.crt"),
        ("get", "configmap", "kube-root-ca.crt", "-n", namespace),
        ("get", "--raw", "/api/v1/configmaps?watch=true&timeoutSeconds=1"),
    ):
        answer = cluster.kubectl(*refused, *AS_INGRESS, check=False)
        assert answer.returncode != 0 and "forbidden" in answer.stderr.lower(), (refused, answer.stderr)


def test_a_refused_delivery_moves_the_gauges_and_a_replay_or_a_dismissal_moves_them_back(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    cluster = towline_installed
    url = orders(cluster, ingress, namespace)
    count = ("towline_webhook_dead_letters", "Filtered")
    oldest = ("towline_webhook_dead_letter_oldest_timestamp_seconds", "Filtered")

    refuse(url, "msg_gauge_1")
    [letter_id] = store(cluster, namespace)
    wait_for("the ingress's gauge to count the letter", lambda: gauges(ingress, namespace).get(count) == 1,
             explain=lambda: gauges(ingress, namespace))
    failed_at = json.loads(store(cluster, namespace)[letter_id])["failedAt"]
    assert gauges(ingress, namespace)[oldest] == datetime.fromisoformat(failed_at).timestamp()

    ok(towline(cluster, namespace, "deadletters", "replay", letter_id, user="admin"))
    wait_for("the gauges to leave the replayed letter out", lambda: gauges(ingress, namespace) == {},
             explain=lambda: gauges(ingress, namespace))

    refuse(url, "msg_gauge_2", order="A-8")
    wait_for("the gauge to count the second letter", lambda: gauges(ingress, namespace).get(count) == 1,
             explain=lambda: gauges(ingress, namespace))
    [second] = [key for key in store(cluster, namespace) if key != letter_id and not key.endswith(".replayed")]
    bind_role(cluster, namespace, "towline-admin", users=("bob",))  # that role alone
    dismissed = patch(cluster, namespace, [{"op": "remove", "path": f"/data/{second}"}], user="bob")
    assert dismissed.returncode == 0, dismissed.stderr
    wait_for("the gauges to leave the dismissed letter out", lambda: gauges(ingress, namespace) == {},
             explain=lambda: gauges(ingress, namespace))
