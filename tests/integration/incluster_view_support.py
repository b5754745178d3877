"""The in-cluster web view as test_web_view_in_cluster.py runs it: the chart's ui.yaml (rendered by helm, nothing
else of the chart) in a namespace of its own with the OIDC people granted there, reached through a port-forward
on 127.0.0.1; runs waiting at a four-eyes gate; the browser signing in at the tests' provider.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from selenium.webdriver.common.by import By
from tests.integration.helmsupport import render
from tests.integration.oidcsupport import BOB, CAROL, grant_oidc_people, kubectl_with_token
from tests.integration.support import get, wait_for
from tests.workers import namespace_prefix

from towline.api.common import Approvers
from towline.api.workflow import ApprovalNotification
from towline.engine.notifications import GateFacts, notification_inputs
from towline_dev.controlplane import ControlPlane
from towline_dev.idp.issuer import ISSUER_URL, WEB_VIEW_CLIENT_ID
from towline_dev.idp.provider import IdentityProvider
from towline_dev.release import local_image_values

SCREENSHOTS = Path(__file__).parents[2] / "docs" / "images"
SERVICE_ACCOUNT = "towline-ui"
SESSION_COOKIE = "__Host-towline-session"
HOOKS = "https://hooks.example.com"
"""ui.webhookUrl: where webhook senders reach the webhook ingress (the view only shows it)."""


@dataclass(frozen=True)
class InClusterView:
    url: str
    namespace: str
    cluster: ControlPlane
    provider: IdentityProvider

    def link(self, path: str) -> str:
        return f"{self.url}/ns/{self.namespace}{path}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def deploy_view(cluster: ControlPlane, provider: IdentityProvider, namespace: str, url: str, secret: str,
                helm_args: tuple[str, ...] = ()) -> None:
    """The chart's ui.yaml (nothing else of the chart) into `namespace`, as helm renders it."""
    cluster.kubectl("-n", namespace, "create", "secret", "generic", "ui-oidc", f"--from-literal=client-secret={secret}")
    cluster.kubectl("-n", namespace, "create", "configmap", "ui-oidc-ca", f"--from-file=ca.crt={provider.ca_bundle}")
    documents = render(cluster.binaries, {
        **local_image_values(), "ui.enabled": "true", "ui.url": url, "ui.defaultNamespace": namespace,
        "ui.oidc.issuer": ISSUER_URL, "ui.oidc.clientId": WEB_VIEW_CLIENT_ID,
        "ui.oidc.clientSecret.name": "ui-oidc", "ui.oidc.caConfigMap.name": "ui-oidc-ca",
    }, "--show-only", "templates/ui.yaml", *helm_args, namespace=namespace)
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in documents))
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/towline-ui", "--timeout=180s", timeout=200)


@contextmanager
def serving_view(cluster: ControlPlane, provider: IdentityProvider, name: str,
                 helm_args: tuple[str, ...] = ()) -> Iterator[InClusterView]:
    """The view in a namespace of its own (the OIDC people granted there), reached at 127.0.0.1 through a
    port-forward to its Service, while the block runs."""
    namespace = f"{namespace_prefix()}{name}-{os.getpid()}"  # under the suite, this worker's operator watches it
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("label", "namespace", namespace, "towline.dev/test=true")
    wait_for("the namespace's default ServiceAccount", lambda: get(cluster, "serviceaccounts", "default", namespace))
    grant_oidc_people(cluster, namespace)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    client = provider.register_client([f"{url}/auth/callback"])
    forward: PortForward | None = None
    try:
        deploy_view(cluster, provider, namespace, url, client.client_secret, helm_args)
        forward = PortForward(
            [str(cluster.binaries.path("kubectl")), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace,
             "port-forward", "--address", "127.0.0.1", "service/towline-ui", f"{port}:80"])
        wait_for("the view through the port-forward", lambda: answers(f"{url}/healthz"), 60)
        yield InClusterView(url, namespace, cluster, provider)
    finally:
        if forward is not None:
            forward.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


class PortForward:
    """`kubectl port-forward` to the view's Service, started again whenever it exits while the view is in use:
    kubectl ends a forward when a connection to the pod breaks (a browser closing a page's live stream once made it
    do so, and the next sign-in found nothing listening). Its messages go to a file, never to an unread pipe, which
    would stall it once full."""

    def __init__(self, argv: list[str]) -> None:
        self._argv = argv
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self.log = Path(tempfile.mkstemp(prefix="towline-ui-port-forward-", suffix=".log")[1])
        self._keeper = threading.Thread(target=self._keep, name="port-forward", daemon=True)
        self._keeper.start()

    def _keep(self) -> None:
        with self.log.open("ab") as log:
            while not self._stopped.is_set():
                with self._lock:
                    if self._stopped.is_set():
                        return
                    self._process = subprocess.Popen(self._argv, stdout=log, stderr=log)
                self._process.wait()
                self._stopped.wait(0.5)  # a forward that cannot start is not started again in a busy loop

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._process.terminate()
        self._keeper.join(15)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def started_run(view: InClusterView, requester_token: str) -> str:
    """A Workflow whose first step is a four-eyes gate bob and carol may decide, and a run carol started with her
    own ID token (so its requester is oidc:carol, as the API server saw her): the run's name."""
    cluster, namespace = view.cluster, view.namespace
    workflow = {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "close-quarter", "namespace": namespace},
        "spec": {"steps": [
            {"id": "review", "approval": {"message": "Close the quarter?", "approvers": {"users": [BOB, CAROL]},
                                          "fourEyes": True, "expiresAfter": "30m"}},
            {"id": "post", "needs": ["review"], "action": "data.transform",
             "with": {"data": {}, "fields": {"ok": "true"}}},
        ]},
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(workflow))
    wait_for("the Workflow Ready", lambda: any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in ((get(cluster, "workflows.towline.dev", "close-quarter", namespace) or {}).get("status") or {})
        .get("conditions", [])), 60)
    run = {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
           "metadata": {"generateName": "close-quarter-", "namespace": namespace},
           "spec": {"workflowRef": {"name": "close-quarter"}, "requestedBy": CAROL}}
    created = kubectl_with_token(cluster, requester_token, "create", "-o", "name", "-f", "-", stdin=json.dumps(run))
    assert created.returncode == 0, created.stderr
    return str(created.stdout.strip().split("/")[-1])


def gated_run(view: InClusterView, requester_token: str) -> tuple[str, str]:
    """`_started_run`'s run and its approval, once it waits at the gate."""
    cluster, namespace = view.cluster, view.namespace
    name = started_run(view, requester_token)

    def waiting() -> str | None:
        found = get(cluster, "workflowruns.towline.dev", name, namespace) or {}
        steps = (found.get("status") or {}).get("steps") or []
        return next((s.get("approvalName") for s in steps if s.get("id") == "review" and s.get("approvalName")
                     and get(cluster, "approvals.towline.dev", s["approvalName"], namespace)), None)

    return name, str(wait_for("the run waiting at its gate", waiting, 120))


def notification_link(view: InClusterView, run: str, approval: str) -> str:
    """The link a webhook receiver gets in the opened gate's notification when the operator's ui.url is this
    view (`url` in its payload), written by the operator's own notification code from the live Approval."""
    found = get(view.cluster, "approvals.towline.dev", approval, view.namespace)
    assert found is not None
    facts = GateFacts(namespace=view.namespace, run=run, workflow="close-quarter", step=found["spec"]["step"],
                      approval=approval, message=found["spec"].get("message", ""),
                      approvers=Approvers.model_validate(found["spec"].get("approvers") or {}), expires_at=None,
                      web_view_url=view.url)
    receiver = ApprovalNotification.model_validate(
        {"events": ["opened"], "action": "webhook.send", "with": {"url": "https://approvals.example.com/hook"}})
    return str(notification_inputs(receiver, facts, "opened")["payload"]["url"])


def sign_in_from(driver: Any, view: InClusterView, person: str, address: str) -> None:
    """Open `address` signed out: the view sends the browser to the provider's login form; sign `person` in
    there, and the browser comes back to `address`."""
    driver.get(address)

    def login_form() -> list[Any]:
        found: list[Any] = driver.find_elements(By.ID, "username")
        if not found and "ERR_NETWORK_CHANGED" in page_text(driver):
            # Chromium drops what is in flight when the machine's interfaces change (a pod's veth came or went on
            # the node beside it) and shows its error page: load the page again, as a person presses Reload.
            driver.get(address)
        return found

    wait_for("the provider's login form", login_form, 60,
             explain=lambda: f"the browser is at {driver.current_url}: {page_text(driver)}")
    driver.find_element(By.ID, "username").send_keys(person)
    driver.find_element(By.ID, "password").send_keys(view.provider.password(person))
    driver.find_element(By.ID, "sign-in").click()
    wait_for(f"{person} back at {address}", lambda: driver.current_url == address, 60,
             explain=lambda: f"the browser is at {driver.current_url}: {page_text(driver)}")


def page_text(driver: Any) -> str:
    """What the page shows now, read in one script call (a page being replaced has no element to go stale)."""
    return str(driver.execute_script("return document.body ? document.body.innerText : ''") or "")[:500]


def session_cookie(driver: Any) -> str:
    return str(next(c["value"] for c in driver.get_cookies() if c["name"] == SESSION_COOKIE))


def press_approve(driver: Any, approval: str) -> Any:
    card = wait_for("the approval's card", lambda: driver.find_elements(
        By.CSS_SELECTOR, f'.approval[data-approval="{approval}"]'), 60)[0]
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    return card


def refusal_in(card: Any) -> Any:
    return wait_for("the refusal", lambda: next(
        (r for r in card.find_elements(By.CSS_SELECTOR, ".result.refused") if r.text), None), 60)


def screenshot(driver: Any, name: str, tmp_path: Path) -> None:
    directory = SCREENSHOTS if os.environ.get("TOWLINE_UPDATE_SCREENSHOTS") == "1" else tmp_path
    driver.save_screenshot(str(directory / name))
