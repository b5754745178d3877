"""Helpers for operator integration tests: kubectl as a person, waiting, and a test-host HTTP server.

Everything here talks to the real local control plane: what a person does through the pinned
kubectl, as the user a test names; the reads of waits and assertions as the admin, by HTTPS GET
(`tests.integration.reads`). Nothing is mocked.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.integration.bindings import until_bound
from tests.integration.reads import read_list, read_object
from tests.integration.waiting import wait_for
from tests.integration.writes import create_as_kubectl, create_from_here

from towline_dev.controlplane import ControlPlane
from towline_dev.node.netns import in_namespace
from towline_dev.node.probehosts import NAMESPACE as TEST_HOSTS_NAMESPACE

TEST_SERVER_ADDRESS = "198.51.100.220"
"""Where `ScriptedServer`s are reached: a test host address (probehosts.py) that step pods can reach."""
TEST_SERVER_ALIAS = "198.51.100.221"
"""A second test host address where every `ScriptedServer` answers too (another host, same server)."""


# Manifests go to kubectl as JSON (which is YAML): PyYAML writes a key `n` or `y` bare, and
# kubectl reads those as YAML 1.1 booleans.
# The admin's new objects, and everyone's `kubectl create`, are created in this process (tests/integration/writes.py),
# as kubectl would create them; the rest, and a person's apply, through kubectl.
# A RoleBinding or ClusterRoleBinding written here is waited for until the authorizer has seen it
# (tests/integration/bindings.py), so the next request of the person it binds is decided with it.
def apply(cluster: ControlPlane, manifest: dict[str, Any] | str, *, user: str = "admin", check: bool = True) -> Any:
    applied = None
    if isinstance(manifest, dict) and user == "admin" and check:
        applied = create_as_kubectl(cluster, manifest, applied=True)
    if applied is None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        applied = cluster.kubectl("apply", "-f", "-", stdin=text, user=user, check=check)
    if isinstance(manifest, dict) and applied.returncode == 0:
        until_bound(cluster, manifest)
    return applied


def create(cluster: ControlPlane, manifest: dict[str, Any], *, user: str = "admin", check: bool = True) -> Any:
    """`kubectl create -f -` as `user`: one POST with their token, from this process (tests/integration/writes.py)."""
    created = create_from_here(cluster, manifest, user=user)
    if created is None:
        created = cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest), user=user, check=check)
    elif check and created.returncode != 0:
        raise subprocess.CalledProcessError(created.returncode, created.args, created.stdout, created.stderr)
    if created.returncode == 0:
        until_bound(cluster, manifest)
    return created


def start_run(cluster: ControlPlane, namespace: str, workflow: str, name: str = "run-1", *, user: str = "carol") -> str:
    """Create a WorkflowRun as `user`, who (as the admission policy insists) is also its requester."""
    create(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"workflowRef": {"name": workflow}, "requestedBy": user},
    }, user=user)
    return name


def get(cluster: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    """The object as the admin reads it, or None (absent, or the API server not answering now)."""
    return read_object(cluster, kind, name, namespace)


def list_objects(cluster: ControlPlane, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
    return read_list(cluster, kind, namespace, selector)


def step_policy(cluster: ControlPlane, job_name: str, namespace: str) -> dict[str, Any] | None:
    """The egress NetworkPolicy that selects a step Job's pod (the run's steps of one egress share it), or None."""
    job = get(cluster, "jobs", job_name, namespace)
    if job is None:
        return None
    labels = job["spec"]["template"]["metadata"]["labels"]
    found = [policy for policy in list_objects(cluster, "networkpolicies", namespace,
                                               f"towline.dev/egress={labels.get('towline.dev/egress', '')}")
             if policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
    assert len(found) <= 1, [policy["metadata"]["name"] for policy in found]
    return found[0] if found else None


def run_phase(cluster: ControlPlane, namespace: str, name: str) -> str | None:
    run = get(cluster, "workflowruns.towline.dev", name, namespace)
    return None if run is None else (run.get("status") or {}).get("phase")


def wait_for_phase(
    cluster: ControlPlane, namespace: str, name: str, phases: set[str], timeout: float = 120
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        run = get(cluster, "workflowruns.towline.dev", name, namespace)
        if run and (run.get("status") or {}).get("phase") in phases:
            return run
        return None

    try:
        result: dict[str, Any] = wait_for(f"run {name} to reach {sorted(phases)}", probe, timeout)
    except AssertionError:
        run = get(cluster, "workflowruns.towline.dev", name, namespace)
        raise AssertionError(f"run {name} did not reach {sorted(phases)}; status: "
                             f"{json.dumps((run or {}).get('status'), indent=1)[:4000]}") from None
    return result


def step_log(cluster: ControlPlane, ns: str, run: str, step: str) -> str:
    """The log of the step's container in the step's last pod."""
    pods = list_objects(cluster, "pods", ns, f"towline.dev/run={run},towline.dev/step={step.replace('_', '-')}")
    assert pods, f"no pod for step {step}"
    return str(cluster.kubectl("logs", "-n", ns, pods[-1]["metadata"]["name"], "-c", "step").stdout)


def step_status(run: dict[str, Any], step_id: str) -> dict[str, Any]:
    for step in run["status"].get("steps", []):
        if step["id"] == step_id:
            return dict(step)
    raise AssertionError(f"step {step_id} not in status: {[s['id'] for s in run['status'].get('steps', [])]}")


def decide(cluster: ControlPlane, namespace: str, approval: str, user: str, decision: str = "Approved",
           reason: str | None = None) -> Any:
    patch: dict[str, Any] = {"decision": decision, "decidedBy": user}
    if reason:
        patch["reason"] = reason
    return cluster.kubectl("patch", "approval", approval, "-n", namespace, "--type", "merge",
                           "-p", json.dumps({"spec": patch}), user=user, check=False)


def awaiting_approval(cluster: ControlPlane, namespace: str, run: str) -> str:
    found = wait_for_phase(cluster, namespace, run, {"AwaitingApproval"})
    name = step_status(found, "review").get("approvalName")
    assert name, "the gate records the Approval's name"
    wait_for("the Approval object", lambda: get(cluster, "approvals.towline.dev", name, namespace))
    return str(name)


def workflow(namespace: str, name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """A Workflow manifest of just these steps."""
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"steps": steps}}


def ready(cluster: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any]:
    """The object's Ready condition, once its status reports on its current generation."""
    def condition() -> dict[str, Any] | None:
        found = get(cluster, kind, name, namespace) or {}
        status = found.get("status") or {}
        for item in status.get("conditions") or []:
            if item["type"] == "Ready" and status.get("observedGeneration") == found["metadata"]["generation"]:
                return dict(item)
        return None

    return dict(wait_for(f"{kind} {name} to report Ready", condition))


def bind_role(cluster: ControlPlane, namespace: str, cluster_role: str, *, users: tuple[str, ...] = (),
              groups: tuple[str, ...] = ()) -> None:
    subjects = [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in users]
    subjects += [{"kind": "Group", "name": g, "apiGroup": "rbac.authorization.k8s.io"} for g in groups]
    apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"{cluster_role}-binding", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": subjects,
    })


@dataclass
class Scripted:
    """Responses a path gives, in order; the last one repeats."""

    responses: list[tuple[int, dict[str, Any] | bytes, dict[str, str]]]
    """(status, JSON payload or raw bytes, extra headers)."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    delay_seconds: float = 0.0
    hold: threading.Event | None = None
    """Answers wait until the test sets it (a step kept running until then), at most HOLD_LIMIT_SECONDS."""


HOLD_LIMIT_SECONDS = 600.0
"""A held answer is sent after this long anyway, so a failed test never leaves a handler waiting forever."""


class ScriptedServer:
    """A real HTTP server whose paths answer from a script, recording every request.

    It runs in this process but listens in the test-hosts network namespace, on a port of
    its own at TEST_SERVER_ADDRESS (and TEST_SERVER_ALIAS), so step containers reach it
    through the node's network and their NetworkPolicies; the test needs the `test_hosts` fixture.
    `port` fixes the port (443 stands in for a service whose connector opens only that port, as
    notify.slack does), plain HTTP all the same; such a server listens at TEST_SERVER_ADDRESS only, since other
    test hosts of the namespace serve fixed ports of their own (the identity provider's 443 at its issuer address).
    """

    def __init__(self, port: int = 0) -> None:
        self.routes: dict[str, Scripted] = {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                answer: tuple[int, dict[str, Any] | bytes, dict[str, str]]
                with server.lock:
                    script = server.routes.get(path)
                    if script is None:
                        answer = (404, {"error": "no such path"}, {})
                    else:
                        script.requests.append({"method": self.command, "headers": dict(self.headers),
                                                "body": body.decode(errors="replace")})
                        index = min(len(script.requests), len(script.responses)) - 1
                        answer = script.responses[index]
                status, payload, headers = answer
                delay = script.delay_seconds if script is not None else 0.0
                if delay:
                    time.sleep(delay)
                if script is not None and script.hold is not None:
                    script.hold.wait(HOLD_LIMIT_SECONDS)
                raw = isinstance(payload, bytes)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream" if raw else "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer  # noqa: N815

        # Every address of the test-hosts namespace, not this machine's (a fixed port: its own address only).
        host = "0.0.0.0" if port == 0 else TEST_SERVER_ADDRESS
        self.httpd = in_namespace(TEST_HOSTS_NAMESPACE, lambda: ThreadingHTTPServer((host, port), Handler))
        # A deliberately slow handler must not hold the test up at shutdown.
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{TEST_SERVER_ADDRESS}:{self.httpd.server_address[1]}"

    def script(
        self, path: str, *responses: tuple[int, dict[str, Any] | bytes, dict[str, str]], delay_seconds: float = 0.0,
        hold: threading.Event | None = None,
    ) -> Scripted:
        with self.lock:
            self.routes[path] = Scripted(list(responses), delay_seconds=delay_seconds, hold=hold)
            return self.routes[path]

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
