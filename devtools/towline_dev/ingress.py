"""The webhook ingress in the local cluster: its chart RBAC, its ServiceAccount's kubeconfig, its process.

Like the operator, the ingress runs as a local process authenticated only as
the chart's ServiceAccount (`ingress.serviceAccount.name`), so tests exercise
the chart's RBAC and admission policies for real. The chart's Deployment and
Service are not applied: there is no image runtime here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from towline_dev.controlplane import ControlPlane
from towline_dev.install import CHART, OPERATOR_NAMESPACE, operator_kubeconfig
from towline_dev.processes import free_loopback_port, spawn, stop_process, wait_for
from towline_dev.release import INGRESS_SERVICE_ACCOUNT
from towline_dev.release import grant_signing_secrets as grant_signing_secrets  # noqa: PLC0414 - its old home
from towline_dev.versions import KUBERNETES_VERSION

_RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def install_ingress_rbac(cluster: ControlPlane, namespace: str = OPERATOR_NAMESPACE) -> None:
    """The ServiceAccount and RBAC of `templates/ingress.yaml`, exactly as `helm template` renders them."""
    rendered = subprocess.run(
        [str(cluster.binaries.path("helm")), "template", "towline", str(CHART), "--namespace", namespace,
         "--kube-version", KUBERNETES_VERSION, "--show-only", "templates/ingress.yaml"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in _RBAC_KINDS]
    cluster.kubectl("create", "namespace", namespace, check=False)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}))


def ingress_kubeconfig(cluster: ControlPlane, path: Path, namespace: str = OPERATOR_NAMESPACE) -> Path:
    return operator_kubeconfig(cluster, path, namespace, service_account=INGRESS_SERVICE_ACCOUNT)


@dataclass
class IngressProcess:
    """A running `towline ingress` on a loopback port (deliveries), and its admin port (health, metrics)."""

    kubeconfig: Path
    log_path: Path
    port: int = 0
    admin_port: int = 0
    max_in_flight: int = 64
    namespace_in_flight: int = 16
    max_buffered_bytes: int = 64 * 1024 * 1024
    namespace_buffered_bytes: int = 16 * 1024 * 1024
    min_body_rate: float = 8192.0
    body_timeout: float = 10.0
    header_timeout: float = 15.0
    settings: dict[str, str] = field(default_factory=dict)
    """Extra TOWLINE_* settings of its environment, e.g. TOWLINE_TRACING_ENDPOINT."""
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def start(self, *, wait_ready: bool = True) -> IngressProcess:
        self.port = self.port or free_loopback_port()
        self.admin_port = self.admin_port or free_loopback_port()
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), **self.settings)
        self.process = spawn(
            [sys.executable, "-m", "towline.cli", "ingress", "--kubeconfig", str(self.kubeconfig),
             "--host", "127.0.0.1", "--port", str(self.port), "--admin-port", str(self.admin_port),
             "--max-in-flight", str(self.max_in_flight), "--namespace-in-flight", str(self.namespace_in_flight),
             "--max-buffered-bytes", str(self.max_buffered_bytes),
             "--namespace-buffered-bytes", str(self.namespace_buffered_bytes),
             "--min-body-rate", str(self.min_body_rate),
             "--body-timeout", str(self.body_timeout), "--header-timeout", str(self.header_timeout)],
            log_path=self.log_path, env=env,
        )
        if wait_ready:
            wait_for(self._ready, timeout=60, interval=0.2, what=f"the ingress on port {self.port} to be ready")
        return self

    def _ready(self) -> bool:
        import urllib.request  # noqa: PLC0415 - only the readiness probe needs it

        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"the ingress exited with {self.process.returncode}; log: {self.log_path}")
        try:
            with urllib.request.urlopen(f"{self.admin_url}/readyz", timeout=2) as response:  # noqa: S310 - loopback
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, grace_seconds=15)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
