"""The archive's read API registered with the real API server, for the tests that read through it: the chart's
RBAC for it (templates/archive-api-rbac.yaml as helm renders it), a test process serving an archive held in memory
(api_server_process.py) with a serving certificate of a CA of its own, and a Service without selector, its
EndpointSlice at that process and the APIService. Readers: alice may read the runs' namespace's WorkflowRuns and
pods' logs, carol its WorkflowRuns only, bob neither.

An APIService is cluster-wide (one archive.towline.dev per cluster): the tests using this are exclusive."""

from __future__ import annotations

import base64
import datetime
import http.client
import secrets
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.archivereader import MemoryArchive
from tests.integration.support import apply, bind_role, wait_for

from towline_dev import REPO_ROOT
from towline_dev.certs import generate_certs, issue_leaf, load_ca, write_key_pair
from towline_dev.controlplane import ControlPlane
from towline_dev.install import CHART, operator_kubeconfig
from towline_dev.processes import free_loopback_port, spawn, stop_process
from towline_dev.versions import KUBERNETES_VERSION

APISERVICE = "v1alpha1.archive.towline.dev"
RELEASE = "archive-api-test"
SERVICE = "towline-archive-api"
ARCHIVE_SA = "towline-archive"
RUNS_READER = "archive-test-runs-reader"
LOG_READER = "archive-test-log-reader"


@dataclass
class Registered:
    plane: ControlPlane
    namespace: str
    """Where the archived runs are."""
    address: str
    port: int
    ca: Path


def chart_rbac(plane: ControlPlane, namespace: str) -> str:
    """The chart's RBAC for the archive's API (templates/archive-api-rbac.yaml), as helm renders it."""
    return subprocess.run(
        [str(plane.binaries.path("helm")), "template", RELEASE, str(CHART), "--namespace", namespace,
         "--kube-version", KUBERNETES_VERSION, "--set", "archive.enabled=true",
         "--set", f"archive.serviceAccount.name={ARCHIVE_SA}", "--show-only", "templates/archive-api-rbac.yaml"],
        capture_output=True, text=True, check=True, timeout=60).stdout


def service_objects(system: str, address: str, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The archive's Service without a selector, its EndpointSlice at the API process, and the APIService."""
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": system},
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{SERVICE}-1", "namespace": system, "labels": {"kubernetes.io/service-name": SERVICE}},
         "addressType": "IPv4", "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
         "endpoints": [{"addresses": [address], "conditions": {"ready": True}}]},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": APISERVICE},
         "spec": {"group": "archive.towline.dev", "version": "v1alpha1",
                  "service": {"name": SERVICE, "namespace": system, "port": 443},
                  "caBundle": base64.b64encode(ca_pem).decode(), "groupPriorityMinimum": 1000,
                  "versionPriority": 15}},
    ]


def healthy(address: str, port: int, ca: Path) -> bool:
    try:
        connection = http.client.HTTPSConnection(address, port, timeout=2,
                                                 context=ssl.create_default_context(cafile=str(ca)))
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False


def _readers(plane: ControlPlane, namespace: str) -> None:
    for role, rules in ((RUNS_READER, [{"apiGroups": ["towline.dev"], "resources": ["workflowruns"],
                                        "verbs": ["get", "list"]}]),
                        (LOG_READER, [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}])):
        apply(plane, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                      "metadata": {"name": role}, "rules": rules})
    bind_role(plane, namespace, RUNS_READER, users=("alice", "carol"))
    bind_role(plane, namespace, LOG_READER, users=("alice",))


@contextmanager
def registered_archive_api(
    plane: ControlPlane, work: Path, prefix: str, archive: Callable[[str], MemoryArchive],
) -> Iterator[Registered]:
    """Two namespaces `<prefix>-<suffix>` (the archive's) and `<prefix>-runs-<suffix>` (the runs'), the API
    serving `archive(runs namespace)`, registered and in discovery; all of it removed afterwards."""
    suffix = secrets.token_hex(3)
    system, namespace = f"{prefix}-{suffix}", f"{prefix}-runs-{suffix}"
    for name in (system, namespace):
        plane.kubectl("create", "namespace", name)
    plane.kubectl("create", "serviceaccount", ARCHIVE_SA, "-n", system)
    rbac = chart_rbac(plane, system)
    plane.kubectl("apply", "-f", "-", stdin=rbac)
    _readers(plane, namespace)

    # The API's serving certificate, of a CA of its own, for the name the API server dials: <service>.<ns>.svc.
    pki = work / "pki"
    generate_certs(pki)
    ca_key, ca_cert = load_ca(pki)
    key, cert = issue_leaf(datetime.datetime.now(datetime.UTC), ca_key, ca_cert, common_name="towline-archive",
                           server_names=(f"{SERVICE}.{system}.svc",), server_ips=(plane.address,))
    write_key_pair(work / "tls.crt", work / "tls.key", key, cert)
    (work / "archive.json").write_text(archive(namespace).to_json())
    port = free_loopback_port()
    process = spawn([sys.executable, "-m", "tests.integration.archive.api_server_process",
                     "--kubeconfig", str(operator_kubeconfig(plane, work / "kubeconfig", system, ARCHIVE_SA)),
                     "--archive", str(work / "archive.json"), "--cert", str(work / "tls.crt"),
                     "--key", str(work / "tls.key"), "--address", plane.address, "--port", str(port)],
                    log_path=work / "archive-api.log", cwd=REPO_ROOT)
    try:
        wait_for("the archive API to serve /healthz", lambda: healthy(plane.address, port, pki / "ca.crt")
                 or process.poll() is not None)
        assert process.poll() is None, (work / "archive-api.log").read_text()
        for document in service_objects(system, plane.address, port, (pki / "ca.crt").read_bytes()):
            apply(plane, document)
        plane.kubectl("wait", "--for=condition=Available", f"apiservice/{APISERVICE}", "--timeout=90s")
        wait_for("archivedruns in the API server's discovery", lambda: "archivedruns" in plane.kubectl(
            "api-resources", "--api-group=archive.towline.dev", check=False).stdout)
        yield Registered(plane, namespace, plane.address, port, pki / "ca.crt")
    finally:
        # First the APIService: one that answers nothing would fail every discovery (and namespace deletion).
        plane.kubectl("delete", "apiservice", APISERVICE, "--ignore-not-found", "--wait=true", check=False)
        stop_process(process)
        plane.kubectl("delete", "-f", "-", "--ignore-not-found", stdin=rbac, check=False)
        plane.kubectl("delete", "clusterrole", RUNS_READER, LOG_READER, "--ignore-not-found", check=False)
        plane.kubectl("delete", "namespace", system, namespace, "--wait=false", check=False)
