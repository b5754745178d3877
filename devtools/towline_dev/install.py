"""Install Towline into a local control plane the way the Helm chart would, and run the operator.

The CRDs come from `crds/`, the RBAC, ServiceAccount and admission policies
from `helm template` of `charts/towline` (exactly the rules the chart ships).
The operator runs as a local process authenticated as its own ServiceAccount,
with a token the API server issued (TokenRequest), so tests exercise the
chart's RBAC for real (and can kill, pause and restart it). Its step Jobs run
the runner image on the cluster's node(s), with the isolation check on, as in
the chart. The chart's Deployment is not applied here (`helm install` does that).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from towline_dev import REPO_ROOT
from towline_dev.controlplane import ControlPlane
from towline_dev.images import RUNNER_IMAGE
from towline_dev.node.layout import KUBERNETES_SERVICE_IP, POD_CIDR, SERVICE_CIDR
from towline_dev.processes import spawn, stop_process
from towline_dev.release import STEP_TYPE_IMAGE_PREFIX
from towline_dev.versions import KUBERNETES_VERSION

CHART = REPO_ROOT / "charts" / "towline"
CRDS = REPO_ROOT / "crds"
OPERATOR_NAMESPACE = "towline-system"
SERVICE_ACCOUNT = "towline-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{SERVICE_ACCOUNT}"
"""The user name the chart's operator acts as (its ServiceAccount)."""
CODE_STEP_TEST_NAMESPACES = ["t-test-code-*", *(f"t-gw{worker}-test-code-*" for worker in range(64))]
"""Where the tests' chart has code steps on: the namespaces of tests named test_code_*, made as
`t-test-code-...` (or `t-gwN-test-code-...` under pytest-xdist, worker N)."""
CHART_TEMPLATES = (
    "templates/serviceaccount.yaml",
    "templates/rbac.yaml",
    "templates/user-roles.yaml",
    "templates/admission-policies.yaml",
    "templates/admission-policy-credentials.yaml",
    "templates/admission-policy-dead-letters.yaml",
    "templates/admission-policy-step-objects.yaml",
    "templates/admission-policy-step-pod-access.yaml",
    "templates/admission-policy-step-types.yaml",
    "templates/archive-rbac.yaml",
)



def install_crds(cluster: ControlPlane) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRDS))


def render_chart(cluster: ControlPlane, namespace: str = OPERATOR_NAMESPACE) -> str:
    """The chart's RBAC, ServiceAccount and admission policies, as `helm template` renders them."""
    # The chart admits step Jobs of the runner image only: the one the tests' operator runs (the local image, or
    # the one an existing cluster's nodes pull, as tests/integration/conftest.py picks it).
    runner_image = os.environ.get("TOWLINE_TEST_RUNNER_IMAGE") or RUNNER_IMAGE
    args = [str(cluster.binaries.path("helm")), "template", "towline", str(CHART), "--namespace", namespace,
            "--kube-version", KUBERNETES_VERSION, "--set", f"runner.image={runner_image}",
            "--set-json", f"stepTypes.allowedImagePrefixes={json.dumps([STEP_TYPE_IMAGE_PREFIX])}",
            # The tests' operators turn code steps on by their own environment (tests/integration/conftest.py);
            # the RBAC they need for it (get on ConfigMaps) comes with the chart's value, and the step-objects
            # policy admits code actions only in the namespaces listed, as the tests' operators have them.
            "--set", "codeSteps.enabled=true",
            "--set-json", f"codeSteps.namespaces={json.dumps(CODE_STEP_TEST_NAMESPACES)}",
            # The archive's ServiceAccount, RBAC and policies; the tests that archive run the process themselves
            # (tests/integration/test_archive_record.py) and turn the operator's finalizer on by its environment.
            "--set", "archive.enabled=true"]
    for template in CHART_TEMPLATES:
        args += ["--show-only", template]
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout


def install_chart(cluster: ControlPlane, namespace: str = OPERATOR_NAMESPACE) -> None:
    cluster.kubectl("create", "namespace", namespace, check=False)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=render_chart(cluster, namespace))
    _wait_for_admission_policies(cluster)


def _wait_for_admission_policies(cluster: ControlPlane) -> None:
    """A freshly created ValidatingAdmissionPolicy takes a moment to be type-checked and enforced."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        result = cluster.kubectl(
            "get", "validatingadmissionpolicies", "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.observedGeneration}{'\\n'}{end}", check=False,
        )
        lines = [line for line in result.stdout.splitlines() if line]
        if lines and all(line.split("=", 1)[1] for line in lines):
            return
        time.sleep(0.5)


def service_account_token(cluster: ControlPlane, namespace: str, service_account: str) -> str:
    """A fresh token of the ServiceAccount, valid for a day, as `kubectl create token` asks the API server for one
    (a TokenRequest as the admin), from this process: the attack tests take one per test, and a kubectl process
    costs about 80 ms of CPU (docs/benchmarks.md). Through kubectl where a request cannot be sent from here (an
    existing cluster)."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 24 * 3600}}
    status, body = cluster.api_request("POST", path, body=json.dumps(request).encode(), timeout=30.0)
    if status == 201:
        return str(json.loads(body)["status"]["token"])
    if status != 501:
        raise RuntimeError(f"no token for ServiceAccount {namespace}/{service_account}: {status} {body[:500]!r}")
    return cluster.kubectl("create", "token", service_account, "-n", namespace, "--duration=24h").stdout.strip()


def operator_kubeconfig(
    cluster: ControlPlane, path: Path, namespace: str = OPERATOR_NAMESPACE, service_account: str = SERVICE_ACCOUNT
) -> Path:
    """A kubeconfig holding a fresh token of the operator's (or `service_account`'s) ServiceAccount, only."""
    token = service_account_token(cluster, namespace, service_account)
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": cluster.server, "certificate-authority": str(cluster.ca_cert)}}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": service_account, "context": {"cluster": "local", "user": service_account}}],
        "current-context": service_account,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(document))
    return path


@dataclass(frozen=True)
class StepPods:
    """What the operator makes step pods with, as the chart's values would tell it."""

    runner_image: str = RUNNER_IMAGE
    isolation_probe: str = f"{KUBERNETES_SERVICE_IP}:443"
    """The `kubernetes` Service as a pod sees it (the chart's operator pod is given it by the kubelet)."""
    cluster_cidrs: tuple[str, ...] = (POD_CIDR, SERVICE_CIDR)
    """The local node's pod and Service ranges (the chart's egress.podCIDRs / serviceCIDRs)."""


def cluster_step_pods(cluster: ControlPlane, runner_image: str = RUNNER_IMAGE) -> StepPods:
    """StepPods for any cluster: its `kubernetes` Service as the isolation probe, no CIDRs known."""
    service = json.loads(cluster.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "json").stdout)
    probe = f"{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
    return StepPods(runner_image=runner_image, isolation_probe=probe, cluster_cidrs=())


@dataclass
class OperatorProcess:
    """A running `towline operator`, restartable and killable for restart-safety tests."""

    kubeconfig: Path
    log_path: Path
    namespace: str = OPERATOR_NAMESPACE
    identity: str = "towline-operator-0"
    metrics_port: int = 0
    """0: no metrics endpoint (tests run several operators on one machine)."""
    health_port: int = 0
    """0: no health endpoint; else kopf's liveness endpoint on loopback-reachable /healthz."""
    watch_namespaces: tuple[str, ...] = ()
    """Empty: every namespace (the chart's default); else only these, as `watchNamespaces` does."""
    process: subprocess.Popen[bytes] | None = None
    settings: dict[str, str] = field(default_factory=dict)
    """Extra TOWLINE_* settings, e.g. shorter Lease timings or a smaller retry budget."""
    pods: StepPods = field(default_factory=StepPods)
    """The runner image and isolation probe of its step pods (default: the local real node's)."""
    clock_file: Path | None = None
    """None: the machine's clock. Else the schedules run on `towline_dev.fakeclock`'s clock in this file."""
    watch_retry_budget: tuple[float, ...] = ()
    """Empty: kopf's own backoffs between attempts of one API request; else these (outage tests)."""
    profile_path: Path | None = None
    """None: no profile. Else the process runs under cProfile, which writes its stats here when it stops
    (the benchmarks' BENCH_OPERATOR_PROFILE)."""

    def start(self) -> OperatorProcess:
        env = dict(os.environ)
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            TOWLINE_NAMESPACE=self.namespace,
            TOWLINE_POD_NAME=self.identity,
            TOWLINE_SERVICE_ACCOUNT=SERVICE_ACCOUNT,
            TOWLINE_RUNNER_IMAGE=self.pods.runner_image,
            TOWLINE_ISOLATION_PROBE=self.pods.isolation_probe,
            TOWLINE_CLUSTER_CIDRS=",".join(self.pods.cluster_cidrs),
            TOWLINE_METRICS_PORT=str(self.metrics_port),
            TOWLINE_HEALTH_PORT=str(self.health_port),
            TOWLINE_WATCH_NAMESPACES=",".join(self.watch_namespaces),
            TOWLINE_METRICS_ADDRESS="127.0.0.1",
            TOWLINE_LOG_FORMAT="json",
            TOWLINE_STEP_TYPE_IMAGE_PREFIXES=STEP_TYPE_IMAGE_PREFIX,
        )
        env.pop("TOWLINE_RUNNER_COMMAND", None)
        env.pop("TOWLINE_REQUIRE_ISOLATION", None)
        env.update(self.settings)
        # Test-only settings go through the dev launcher; the shipped command has no way to take them.
        command = ["-m", "towline.cli", "operator"]
        if self.clock_file is not None or self.watch_retry_budget:
            command = ["-m", "towline_dev.testoperator"]
            if self.clock_file is not None:
                command += ["--clock-file", str(self.clock_file)]
            if self.watch_retry_budget:
                command += ["--watch-retry-budget", ",".join(f"{s:g}" for s in self.watch_retry_budget)]
        if self.profile_path is not None:
            command = ["-m", "cProfile", "-o", str(self.profile_path), *command]
        # Its own process group (so a kill takes everything it started), and it dies with its parent.
        self.process = spawn(
            [sys.executable, *command, "--kubeconfig", str(self.kubeconfig)],
            log_path=self.log_path, env=env,
        )
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup, no goodbye, as a node failure would do it."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the process stays alive but does nothing, as a long GC pause or a frozen VM would."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, grace_seconds=15)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
