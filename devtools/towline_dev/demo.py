"""What `make dev` puts into the cluster besides the chart: the demo workflow, its people and its webhook.

The demo workflow `hello-towline` calls a small demo API (`towline_dev.demoapi`)
that runs in the test-host network namespace on a documentation address, so its
steps reach it through their NetworkPolicy (`allowHosts` names the address),
waits at a four-eyes approval bob may give, then deploys. Its webhook trigger is
signed with Standard Webhooks; the signing secret is written to a file (0600)
for `towline webhook send`.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

from towline_dev.controlplane import ControlPlane
from towline_dev.release import grant_signing_secrets

DEMO_NAMESPACE = "towline-demo"
EXAMPLES_NAMESPACE = "towline-examples"
DEMO_WORKFLOW = "hello-towline"
DEMO_API_ADDRESS = "198.51.100.200"
"""In the test-host range (`towline_dev.node.probehosts`): reachable from pods through the node."""
DEMO_API_PORT = 8080
DEMO_WEBHOOK_SECRET = "demo-webhook"  # noqa: S105 - the Secret's name, not its value
DEMO_TRIGGER = "deploy_request"


def demo_api_endpoint() -> str:
    return f"{DEMO_API_ADDRESS}:{DEMO_API_PORT}"


def demo_webhook_trigger() -> dict[str, object]:
    """The demo workflow's webhook trigger: Standard Webhooks, and only `service` enters the run."""
    return {
        "name": DEMO_TRIGGER,
        "webhook": {
            "verify": {"scheme": "standard-webhooks", "secretRef": {"name": DEMO_WEBHOOK_SECRET,
                                                                    "key": "signing-secret"}},
            "data": {"service": "has(body.service) ? string(body.service) : 'checkout'"},
        },
    }


def demo_workflow() -> dict[str, Any]:
    api_url = f"http://{demo_api_endpoint()}"
    # A literal address in allowHosts: the step's NetworkPolicy opens the API's port to exactly it.
    allow = [DEMO_API_ADDRESS]
    return {
        "apiVersion": "towline.dev/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": DEMO_WORKFLOW, "namespace": DEMO_NAMESPACE},
        "spec": {
            "params": [{"name": "service", "type": "string", "default": "checkout"}],
            "triggers": [demo_webhook_trigger()],
            "steps": [
                {"id": "check", "action": "http.request", "allowHosts": allow,
                 "with": {"url": f"{api_url}/status", "select": "response.body"}},
                {"id": "review", "needs": ["check"],
                 "approval": {"message": "Deploy ${{ params.service }} ${{ steps.check.output.version }}?",
                              # carol may approve others' runs: what refuses her on her own is four-eyes.
                              "approvers": {"users": ["bob", "carol"], "groups": ["approvers"]},
                              "fourEyes": True, "expiresAfter": "1h"}},
                {"id": "deploy", "needs": ["review"], "action": "http.request", "allowHosts": allow,
                 "with": {"url": f"{api_url}/deploy", "method": "POST",
                          "json": {"service": "${{ params.service }}",
                                   "version": "${{ steps.check.output.version }}"}}},
            ],
            "finally": [
                {"id": "summary", "action": "data.transform",
                 "with": {"data": {"run": "${{ run.name }}"}, "fields": {"text": "'finished ' + data.run"}}},
            ],
        },
    }


def demo_run() -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1",
        "kind": "WorkflowRun",
        "metadata": {"generateName": f"{DEMO_WORKFLOW}-", "namespace": DEMO_NAMESPACE},
        "spec": {"workflowRef": {"name": DEMO_WORKFLOW}, "requestedBy": "carol"},
    }


def grant_demo_roles(cluster: ControlPlane, namespace: str = DEMO_NAMESPACE) -> None:
    """carol and alice may start runs; bob, alice and carol may try to decide (the admission policy then judges)."""
    for role, users in (("towline-runner", ["carol", "alice"]), ("towline-approver", ["bob", "alice", "carol"])):
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in users],
        }
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(binding))


def create_demo_webhook_secret(cluster: ControlPlane, secret_file: Path, namespace: str = DEMO_NAMESPACE) -> Path:
    """A fresh signing secret in the trigger's Secret and in `secret_file` (0600), granted to the ingress."""
    signing_secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    secret_file.parent.mkdir(parents=True, exist_ok=True)
    secret_file.touch(mode=0o600)
    secret_file.write_text(signing_secret + "\n")
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": DEMO_WEBHOOK_SECRET, "namespace": namespace},
        "stringData": {"signing-secret": signing_secret},
    }))
    grant_signing_secrets(cluster, namespace, [DEMO_WEBHOOK_SECRET])
    return secret_file


def ingress_url(cluster: ControlPlane, namespace: str) -> str:
    """The Helm-installed ingress's Service address; this machine (the node) reaches it through kube-proxy."""
    service = json.loads(cluster.kubectl("get", "service", "towline-ingress", "-n", namespace, "-o", "json").stdout)
    port = service["spec"]["ports"][0]["port"]
    return f"http://{service['spec']['clusterIP']}" + ("" if port == 80 else f":{port}")


def send_command(url: str, secret_file: Path, namespace: str = DEMO_NAMESPACE) -> str:
    """A ready-to-paste `towline webhook send` for the demo trigger."""
    program = "towline" if shutil.which("towline") else f"{sys.executable} -m towline.cli"
    return (f"{program} webhook send {url}/hooks/{namespace}/{DEMO_WORKFLOW}/{DEMO_TRIGGER} \\\n"
            f"      --secret-file {secret_file} --data '{{\"service\": \"checkout\"}}'")
