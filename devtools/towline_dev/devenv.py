"""`towline-dev` (what `make dev` runs): control plane, operator, examples and a demo run.

Everything a newcomer needs to see Towline work within a minute, on this
machine alone: the local control plane and step executor, the CRDs and the
chart's RBAC and admission policies, the operator as its own ServiceAccount,
the examples applied, and a demo workflow whose steps call a small demo API on
loopback and wait for bob's approval. Ctrl-C tears everything down.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from towline_dev import REPO_ROOT
from towline_dev.cli import cluster_main, default_home, start_dev_cluster, state_file
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess, demo_webhook_trigger, send_command, start_dev_ingress
from towline_dev.install import (
    OperatorProcess,
    install_chart,
    install_crds,
    operator_kubeconfig,
)
from towline_dev.processes import stop_process

DEMO_NAMESPACE = "towline-demo"
EXAMPLES_NAMESPACE = "towline-examples"


class _DemoApi(BaseHTTPRequestHandler):
    """A pretend deployment API: GET /status reports a version, POST /deploy accepts it."""

    def log_message(self, *args: Any) -> None:
        return

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, {"service": "checkout", "version": "2.4.1", "healthy": True})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self._send(202, {"deployed": body.get("version"), "idempotencyKey": self.headers.get("Idempotency-Key")})


def demo_workflow(api_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "hello-towline", "namespace": DEMO_NAMESPACE},
        "spec": {
            "params": [{"name": "service", "type": "string", "default": "checkout"}],
            "triggers": [demo_webhook_trigger()],
            "steps": [
                {"id": "check", "action": "http.request",
                 "with": {"url": f"{api_url}/status", "select": "response.body"},
                 "allowPrivateNetworks": ["127.0.0.0/8"]},
                {"id": "review", "needs": ["check"],
                 "approval": {"message": "Deploy ${{ params.service }} ${{ steps.check.output.version }}?",
                              "approvers": {"users": ["bob"], "groups": ["approvers"]},
                              "fourEyes": True, "expiresAfter": "1h"}},
                {"id": "deploy", "needs": ["review"], "action": "http.request",
                 "with": {"url": f"{api_url}/deploy", "method": "POST",
                          "json": {"service": "${{ params.service }}", "version": "${{ steps.check.output.version }}"}},
                 "allowPrivateNetworks": ["127.0.0.0/8"]},
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
        "metadata": {"generateName": "hello-towline-", "namespace": DEMO_NAMESPACE},
        "spec": {"workflowRef": {"name": "hello-towline"}, "requestedBy": "carol"},
    }


def _grant_demo_roles(plane: ControlPlane, namespace: str) -> None:
    for role, users in (("towline-runner", ["carol", "alice"]), ("towline-approver", ["bob", "alice", "carol"])):
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in users],
        }
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(binding))


def _walkthrough(plane: ControlPlane, started: float, webhook_command: str) -> str:
    kubectl = plane.binaries.path("kubectl")
    return f"""
Towline is running ({time.monotonic() - started:.0f} s). In another shell:

  export KUBECONFIG={plane.kubeconfig} PATH={kubectl.parent}:$PATH
  kubectl -n {DEMO_NAMESPACE} get workflows,workflowruns,jobs,approvals
  kubectl -n {EXAMPLES_NAMESPACE} get workflows          # the examples, validated (Ready)

The demo run waits for an approval. carol started it, so four-eyes forbids her;
alice is not an approver; bob is. Approve it as bob:

  kubectl --context bob -n {DEMO_NAMESPACE} patch approval NAME --type merge \\
      -p '{{"spec":{{"decision":"Approved","decidedBy":"bob"}}}}'

(NAME from `kubectl -n {DEMO_NAMESPACE} get approvals`). Try the same as alice or
carol to watch the API server refuse. Start another run as carol with
  kubectl --context carol create -f - <<<'{json.dumps(demo_run())}'

Send a signed webhook delivery (Standard Webhooks) to the demo workflow's trigger;
it starts a run that waits for bob, like the first one. Send it twice with the
same --id and the second answer names the same run:

  {webhook_command}

Operator log: {plane.logs_dir / "operator.log"}   Ingress log: {plane.logs_dir / "ingress.log"}
Step logs: {plane.state_dir / "executor" / "logs"}
Ctrl-C stops everything.
"""


def dev_main(argv: list[str]) -> int:
    if argv[:1] == ["cluster"]:
        return cluster_main(argv[1:])
    if argv:
        print("usage: towline-dev [cluster up|down|env]", file=sys.stderr)
        return 2
    started = time.monotonic()
    home = default_home()
    cluster = start_dev_cluster(home)
    if cluster is None:
        return 1
    plane, executor, _ = cluster
    demo = ThreadingHTTPServer(("127.0.0.1", 0), _DemoApi)
    threading.Thread(target=demo.serve_forever, daemon=True).start()
    operator: OperatorProcess | None = None
    ingress: IngressProcess | None = None
    try:
        install_crds(plane)
        install_chart(plane)
        kubeconfig = operator_kubeconfig(plane, plane.state_dir / "operator.kubeconfig")
        operator = OperatorProcess(kubeconfig=kubeconfig, log_path=plane.logs_dir / "operator.log").start()
        for namespace in (DEMO_NAMESPACE, EXAMPLES_NAMESPACE):
            plane.kubectl("create", "namespace", namespace, check=False)
        _grant_demo_roles(plane, DEMO_NAMESPACE)
        ingress, secret_file = start_dev_ingress(plane, DEMO_NAMESPACE)
        plane.kubectl("apply", "-n", EXAMPLES_NAMESPACE, "-f", str(REPO_ROOT / "examples"))
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(demo_workflow(f"http://127.0.0.1:{demo.server_port}")))
        plane.kubectl("create", "-f", "-", stdin=json.dumps(demo_run()), user="carol")
        webhook_command = send_command(ingress, DEMO_NAMESPACE, "hello-towline", secret_file)
        print(_walkthrough(plane, started, webhook_command), flush=True)
        while (executor.poll() is None and plane.is_running() and operator.process and operator.process.poll() is None
               and ingress.process and ingress.process.poll() is None):
            time.sleep(0.5)
        print(f"error: a component exited; logs are in {plane.logs_dir}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping Towline dev…", file=sys.stderr)
        return 0
    finally:
        if operator is not None:
            operator.stop()
        if ingress is not None:
            ingress.stop()
        demo.shutdown()
        stop_process(executor, grace_seconds=10)
        plane.stop()
        state_file(home).unlink(missing_ok=True)


def console_main() -> int:
    """The `towline-dev` command (installed by `make install` from devtools/, never shipped)."""
    return dev_main(sys.argv[1:])
