"""Runs that failed before their first step, as dead letters of kind `run`, through the real API server and operator:
an admin lists one (`kubectl towline deadletters`) and replays it once as a run that names who replayed it; the
listing shows nothing of a Secret the Workflow names; a runner, who may start runs, is refused the replay by the API
server's admission policy, through the plugin and straight at the API server."""

from __future__ import annotations

import json

import pytest
from tests.integration.ingress_support import (
    create_secret,
    hook_url,
    ingress,
    new_whsec,
    opt_in,
    post,
    signed_standard,
    standard_webhook,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.letterssupport import RUNS, early_run, orders, run_letters, username
from tests.integration.metricsupport import scrape, value
from tests.integration.pluginsupport import ok, towline
from tests.integration.support import apply, bind_role, create, list_objects, wait_for, wait_for_phase

from towline.k8s.deliveryletters import REPLAY_OF_ANNOTATION, REPLAYED_BY_ANNOTATION
from towline.plugin.runletters import RunLetter, replay_manifest, run_letter
from towline_connectors.wire import parse_rfc3339
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess
from towline_dev.install import OperatorProcess

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

CANARY = "canary-run-letter-7d1f0c2b9e"
"""The value of the Secret the Workflow's step names: no listing or replay may ever show it."""

@pytest.fixture
def orders_namespace(towline_installed: ControlPlane, namespace: str) -> str:
    cluster = towline_installed
    bind_role(cluster, namespace, "towline-runner", users=("alice",))
    cluster.kubectl("create", "secret", "generic", "crm-api", "-n", namespace, f"--from-literal=token={CANARY}")
    return namespace


def test_a_run_that_failed_before_its_first_step_is_listed_and_replayed_once_by_an_admin(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, orders_namespace: str
) -> None:
    cluster, ns = towline_installed, orders_namespace
    failed = early_run(cluster, ns, "early")
    assert "does not exist" in failed["status"]["message"]
    apply(cluster, orders(ns))

    [letter] = run_letters(cluster, ns)
    assert (letter["id"], letter["workflow"], letter["triggerType"]) == ("early", "orders", "manual")
    assert letter["params"] == {"region": "emea"} and letter["requestedBy"] == "alice"
    assert "does not exist" in letter["reason"] and letter["replayedBy"] is None
    shown = ok(towline(cluster, ns, "deadletters", user="admin"))
    assert any(line.split()[:2] == ["run", "early"] for line in shown.splitlines()), shown
    # The operator counts it, from the runs it watches, until a run replays it.
    wait_for("the run letter in the operator's gauge", lambda: value(
        scrape(towline_operator), "towline_run_dead_letters", namespace=ns, trigger="manual") == 1)
    assert value(scrape(towline_operator), "towline_run_dead_letter_oldest_timestamp_seconds",
                 namespace=ns, trigger="manual") == parse_rfc3339(failed["status"]["finishedAt"]).timestamp()

    replayed = ok(towline(cluster, ns, "deadletters", "replay", "early", user="admin"))
    admin = username(cluster, "admin")
    [replay] = [run for run in list_objects(cluster, RUNS, ns) if run["metadata"]["name"] != "early"]
    name = replay["metadata"]["name"]
    assert f"replayed by {admin} as run {name}" in replayed, replayed
    assert replay["metadata"]["annotations"][REPLAYED_BY_ANNOTATION] == admin
    assert replay["metadata"]["annotations"][REPLAY_OF_ANNOTATION] == "workflowruns/early"
    assert replay["spec"]["requestedBy"] == admin and replay["spec"]["params"] == {"region": "emea"}
    assert "trigger" not in replay["spec"] or replay["spec"]["trigger"].get("type", "manual") == "manual"
    wait_for_phase(cluster, ns, name, {"AwaitingApproval"})  # this time it started

    [marked] = run_letters(cluster, ns)
    assert (marked["replayedBy"], marked["replayRun"]) == (admin, name)
    wait_for("the replayed letter gone from the operator's gauge", lambda: value(
        scrape(towline_operator), "towline_run_dead_letters", namespace=ns, trigger="manual") == 0)
    again = towline(cluster, ns, "deadletters", "replay", "early", user="admin")
    assert again.returncode != 0 and name in again.stderr, again.stderr
    assert len(list_objects(cluster, RUNS, ns)) == 2, "a second replay starts no run"

    listed = towline(cluster, ns, "deadletters", "-o", "json", user="admin").stdout
    for text in (listed, shown, json.dumps(list_objects(cluster, RUNS, ns))):
        assert CANARY not in text, "a Secret's value reached a dead letter or its replay"


def test_a_runner_may_not_replay_a_failed_run_through_the_plugin_or_the_api_server(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, orders_namespace: str
) -> None:
    cluster, ns = towline_installed, orders_namespace
    failed = early_run(cluster, ns, "early")
    apply(cluster, orders(ns))

    # alice may start runs of orders and read early, but the replay she asks for is the API server's to refuse.
    refused = towline(cluster, ns, "deadletters", "replay", "early", user="alice")
    assert refused.returncode != 0 and "alice may not replay dead letters" in refused.stderr, refused.stderr

    # Straight at the API server, the very run the plugin builds, named as herself or as the admin.
    letter = run_letter(failed)
    assert isinstance(letter, RunLetter)
    workflow_uid = cluster.kubectl("get", "workflow.towline.dev", "orders", "-n", ns, "-o",
                                   "jsonpath={.metadata.uid}").stdout
    for who in ("alice", username(cluster, "admin")):
        forged = replay_manifest(letter, who, f"forged-{len(who)}", workflow_uid)
        forged["spec"]["requestedBy"] = "alice"
        answer = create(cluster, forged, user="alice", check=False)
        assert answer.returncode != 0, f"alice created a run marked as replayed by {who}"
        assert "may not replay" in answer.stderr or "replayed-by" in answer.stderr, answer.stderr
    assert [run["metadata"]["name"] for run in list_objects(cluster, RUNS, ns)] == ["early"]


def test_a_run_letter_is_found_by_the_shared_replay_code_only_for_a_failed_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, orders_namespace: str
) -> None:
    """A run that started is no letter: replaying it is refused naming its phase, and nothing is created."""
    cluster, ns = towline_installed, orders_namespace
    apply(cluster, orders(ns))
    create(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                     "metadata": {"name": "started", "namespace": ns},
                     "spec": {"workflowRef": {"name": "orders"}, "params": {"region": "emea"},
                              "requestedBy": "alice"}}, user="alice")
    wait_for_phase(cluster, ns, "started", {"AwaitingApproval"})
    assert run_letters(cluster, ns) == []
    refused = towline(cluster, ns, "deadletters", "replay", "started", user="admin")
    assert refused.returncode != 0 and "did not fail before its first step" in refused.stderr, refused.stderr
    assert len(list_objects(cluster, RUNS, ns)) == 1


def test_a_webhook_run_that_failed_before_its_first_step_is_replayed_with_its_trigger_and_data(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    """The ingress starts a run the operator refuses (a param the Workflow requires, which no delivery gives); once
    the Workflow has a default, the admin's replay is a webhook run of the same trigger and data, and it runs."""
    cluster = towline_installed
    key = new_whsec()
    create_secret(cluster, namespace, "hooked-key", {"signing-secret": key})
    opt_in(cluster, namespace, "hooked-key")
    workflow = webhook_workflow("hooked", namespace, standard_webhook("hooked-key", data={"order": "body.id"}))
    workflow["spec"]["params"] = [{"name": "region", "type": "string", "required": True}]
    apply(cluster, workflow)
    wait_until_cached(ingress, namespace, "hooked")
    body = json.dumps({"id": "A-9"}).encode()
    delivered = post(hook_url(ingress, namespace, "hooked"), body, signed_standard(key, body))
    assert delivered.status_code == 202, delivered.text
    [failed] = list_objects(cluster, RUNS, namespace)
    name = failed["metadata"]["name"]
    assert "region" in wait_for_phase(cluster, namespace, name, {"Failed"})["status"]["message"]

    [letter] = run_letters(cluster, namespace)
    assert (letter["id"], letter["triggerType"], letter["trigger"]) == (name, "webhook", "hook")
    assert letter["data"] == {"order": "A-9"}
    workflow["spec"]["params"] = [{"name": "region", "type": "string", "default": "emea"}]
    apply(cluster, workflow)
    ok(towline(cluster, namespace, "deadletters", "replay", name, user="admin"))
    [replay] = [run for run in list_objects(cluster, RUNS, namespace) if run["metadata"]["name"] != name]
    assert replay["spec"]["trigger"] == {"type": "webhook", "name": "hook", "data": {"order": "A-9"}}
    assert replay["metadata"]["annotations"][REPLAY_OF_ANNOTATION] == f"workflowruns/{name}"
    wait_for_phase(cluster, namespace, replay["metadata"]["name"], {"Succeeded"}, timeout=240)
