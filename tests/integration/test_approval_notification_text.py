"""A gate's message bound from a run's params, end to end: Slack and a JSON receiver get it escaped and marked.

carol starts a run whose `note` param the gate's message quotes, with a
Slack mention of the whole channel, a link under words of her choosing and
terminal escapes. A real HTTP server on a test host stands in for Slack's
incoming webhook (its URL is the notification's credential, its host the
entry's allowHosts, its port 443: the only one notify.slack's pod may reach)
and for a webhook receiver.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from tests.integration.support import (
    TEST_SERVER_ADDRESS,
    ScriptedServer,
    apply,
    create,
    get,
    list_objects,
    wait_for,
)

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

HOSTILE = "<!channel> <https://evil.example/approve|Approve here> & \x1b]0;owned\x07\x1b[2J\x9b31m"


def quoting_workflow(namespace: str, sink: str) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "ship", "namespace": namespace},
        "spec": {
            "params": [{"name": "note"}],
            "steps": [{"id": "review", "approval": {"message": "Ship it? ${{ params.note }}",
                                                    "approvers": {"users": ["bob"]}}}],
            "approvalNotifications": [
                {"events": ["opened"], "action": "notify.slack", "credentials": {"slack": "ops-slack"},
                 "allowHosts": [TEST_SERVER_ADDRESS]},
                {"events": ["opened"], "action": "webhook.send", "with": {"url": f"{sink}/hook"},
                 "credentials": {"webhook": "approvals-hook"}},
            ],
        },
    }


def finished_notifications(cluster: ControlPlane, namespace: str) -> list[dict[str, Any]] | None:
    jobs = [job for job in list_objects(cluster, "jobs", namespace, "towline.dev/run=ship-1")
            if "towline.dev/notification" in job["metadata"].get("labels", {})]
    done = [job for job in jobs if any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                                       for c in (job.get("status") or {}).get("conditions") or [])]
    return jobs if len(jobs) == 2 and len(done) == 2 else None


def pod_endings(cluster: ControlPlane, namespace: str) -> list[Any]:
    """Each notification pod's container endings, for a failure message."""
    return [(pod["metadata"]["name"], [(s.get("name"), s.get("state")) for s in
                                       (pod.get("status") or {}).get("containerStatuses") or []])
            for pod in list_objects(cluster, "pods", namespace, "towline.dev/run=ship-1")]


def test_a_message_bound_from_params_reaches_slack_escaped_and_json_as_data(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as server, ScriptedServer(port=443) as slack_server:
        slack = slack_server.script("/slack", (200, b"ok", {}))
        hook = server.script("/hook", (200, {}, {}))
        for name, data in (("ops-slack", {"url": f"{slack_server.url}/slack"}),
                           ("approvals-hook", {"signing-secret": "whsec_" + base64.b64encode(b"k" * 32).decode()})):
            apply(cluster, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
                            "stringData": data})
        apply(cluster, quoting_workflow(ns, server.url))
        create(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                         "metadata": {"name": "ship-1", "namespace": ns},
                         "spec": {"workflowRef": {"name": "ship"}, "requestedBy": "carol",
                                  "params": {"note": HOSTILE}}}, user="carol")

        approval = wait_for("the Approval", lambda: get(cluster, "approvals.towline.dev", "ship-1-review", ns))
        assert approval["spec"]["message"] == f"Ship it? {HOSTILE}" and approval["spec"]["messageFromInputs"] is True
        wait_for("both notification Jobs to finish", lambda: finished_notifications(cluster, ns), timeout=240)
        assert slack.requests and hook.requests, pod_endings(cluster, ns)

        text = json.loads(slack.requests[0]["body"])["text"]
        assert "&lt;!channel&gt; &lt;https://evil.example/approve|Approve here&gt; &amp;" in text, text
        assert "<!channel>" not in text and "<https://" not in text
        assert not any(c in text for c in "\x1b\x07\x9b"), text
        assert "quoting the run's inputs (not written by the Workflow's author)" in text

        payload = json.loads(hook.requests[0]["body"])
        assert payload["message"] == f"Ship it? {HOSTILE}" and payload["messageFromInputs"] is True
