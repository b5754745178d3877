"""The webhook ingress for integration tests: a module-scoped process, Secrets, signed deliveries.

The ingress runs as its own process, authenticated only as the chart's ingress
ServiceAccount, against the real local control plane; deliveries go to it over
loopback HTTP.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from tests.integration.support import apply, list_objects, wait_for
from tests.keptlogs import kept_logs_root

from towline.triggers.ingress import sign
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess, grant_signing_secrets, ingress_kubeconfig, install_ingress_rbac


@pytest.fixture(scope="module")
def ingress(towline_installed: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IngressProcess]:
    """One ingress per test module, as the chart's ingress ServiceAccount."""
    install_ingress_rbac(towline_installed)
    work = tmp_path_factory.mktemp("ingress")
    process = IngressProcess(kubeconfig=ingress_kubeconfig(towline_installed, work / "kubeconfig"),
                             log_path=work / "ingress.log").start()
    yield process
    process.stop()
    (kept_logs_root() / "ingress.log").write_text(process.log_text())


def new_whsec() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def create_secret(cluster: ControlPlane, namespace: str, name: str, data: dict[str, str]) -> None:
    apply(cluster, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    })


def opt_in(cluster: ControlPlane, namespace: str, *secret_names: str) -> None:
    grant_signing_secrets(cluster, namespace, list(secret_names))


def webhook_workflow(name: str, namespace: str, webhook: dict[str, Any], *, trigger: str = "hook",
                     suspend: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "triggers": [{"name": trigger, "webhook": webhook}],
            "steps": [{"id": "noop", "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}}],
            "suspend": suspend,
        },
    }


def standard_webhook(secret_name: str = "hook-secret", **extra: Any) -> dict[str, Any]:
    return {"verify": {"scheme": "standard-webhooks", "secretRef": {"name": secret_name, "key": "signing-secret"}},
            **extra}


def hook_url(ingress: IngressProcess, namespace: str, workflow: str, trigger: str = "hook") -> str:
    return f"{ingress.url}/hooks/{namespace}/{workflow}/{trigger}"


def signed_standard(secret: str, body: bytes, *, delivery_id: str | None = None, at: float | None = None
                    ) -> dict[str, str]:
    headers = sign.standard_webhooks_headers(secret, delivery_id or f"msg_{secrets.token_hex(8)}",
                                             int(time.time() if at is None else at), body)
    return {"Content-Type": "application/json", **headers}


def post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, content=body, headers=headers, timeout=30)


def wait_until_cached(ingress: IngressProcess, namespace: str, workflow: str, trigger: str = "hook",
                      *, gone: bool = False, log_marker: str | None = None) -> None:
    """The ingress's watch has delivered the Workflow: an unsigned probe is refused for its signature (401)
    rather than answered with the uniform 404; with `gone`, the reverse. With `log_marker`, the ingress has
    logged that text for a probe (an invalid Workflow answers 404 either way; only its log says why)."""
    def known() -> bool:
        response = post(hook_url(ingress, namespace, workflow, trigger), b"{}", {"Content-Type": "application/json"})
        if log_marker is not None:
            return log_marker in ingress.log_text()
        reason = response.json().get("reason")
        if gone:
            return bool(reason == "NotFound")
        return reason not in {"NotFound", "NotReady"}
    # Ready comes from the worker's operator, which shares the cores with two other workers and two worlds.
    wait_for(f"the ingress to see Workflow {namespace}/{workflow}", known, timeout=90, interval=0.2)


def runs(cluster: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return list_objects(cluster, "workflowruns.towline.dev", namespace)


def refusal(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(response.text)
    return body


@contextmanager
def another_namespace(cluster: ControlPlane, namespace: str, suffix: str) -> Iterator[str]:
    """A second tenant's namespace next to the test's own, deleted afterwards."""
    name = f"{namespace[:56]}-{suffix}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def signed_trigger(cluster: ControlPlane, ingress: IngressProcess, namespace: str, workflow: str,
                   **webhook: Any) -> tuple[str, str]:
    """A Workflow with a standard-webhooks trigger `hook` whose granted Secret holds a fresh key; (url, key)."""
    secret = new_whsec()
    create_secret(cluster, namespace, f"{workflow}-key", {"signing-secret": secret})
    opt_in(cluster, namespace, f"{workflow}-key")
    apply(cluster, webhook_workflow(workflow, namespace, standard_webhook(f"{workflow}-key", **webhook)))
    wait_until_cached(ingress, namespace, workflow)
    return hook_url(ingress, namespace, workflow), secret


def ingress_gauge(ingress: IngressProcess, name: str) -> float:
    """The value of an unlabelled gauge on the ingress's admin /metrics, e.g. `towline_webhook_buffered_bytes`."""
    text = httpx.get(f"{ingress.admin_url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not on {ingress.admin_url}/metrics")
