"""The archive's read API through the real API server: registered as the aggregated API archive.towline.dev (the
chart's RBAC for it, a Service without selector and an EndpointSlice pointing at the API process on the node
address), read with kubectl as the people of the local control plane. Who sees what is decided by the API server's
own RBAC, asked by SubjectAccessReview: `get/list workflowruns` for the runs, `get pods/log` as well for a log.

Exclusive: an APIService is cluster-wide (one archive.towline.dev per cluster), and while it is registered every
discovery on the cluster goes through it."""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import secrets
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.archivereader import MemoryArchive, archived_run, log_entry
from tests.integration.support import apply, bind_role, wait_for

from towline_dev import REPO_ROOT
from towline_dev.certs import generate_certs, issue_leaf, load_ca, write_key_pair
from towline_dev.controlplane import ControlPlane
from towline_dev.install import CHART, operator_kubeconfig
from towline_dev.kubeconfig import context_name
from towline_dev.node.realnode import NodeCluster
from towline_dev.processes import free_loopback_port, spawn, stop_process
from towline_dev.versions import KUBERNETES_VERSION

pytestmark = pytest.mark.exclusive

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


def the_archive(namespace: str) -> MemoryArchive:
    archive = MemoryArchive()
    run = archived_run(namespace, "deploy-prod-1", seq=1, approvers=("bob",), requester="carol")
    archive.add(run, log_entry(namespace, run, "apply", "applied 3 objects\n", seq=2))
    archive.add(archived_run(namespace, "deploy-prod-2", seq=4, phase="Failed",
                             started=run.started_at + datetime.timedelta(days=1)))
    return archive


@pytest.fixture(scope="module")
def registered(real_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registered]:
    plane = real_node.plane
    assert plane is not None
    work = tmp_path_factory.mktemp("archive-api")
    suffix = secrets.token_hex(3)
    system, namespace = f"t-archive-api-{suffix}", f"t-archive-runs-{suffix}"
    for name in (system, namespace):
        plane.kubectl("create", "namespace", name)
    plane.kubectl("create", "serviceaccount", ARCHIVE_SA, "-n", system)
    rbac = chart_rbac(plane, system)
    plane.kubectl("apply", "-f", "-", stdin=rbac)
    for role, rules in ((RUNS_READER, [{"apiGroups": ["towline.dev"], "resources": ["workflowruns"],
                                        "verbs": ["get", "list"]}]),
                        (LOG_READER, [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}])):
        apply(plane, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                      "metadata": {"name": role}, "rules": rules})
    bind_role(plane, namespace, RUNS_READER, users=("alice", "carol"))
    bind_role(plane, namespace, LOG_READER, users=("alice",))

    # The API's serving certificate, of a CA of its own, for the name the API server dials: <service>.<ns>.svc.
    pki = work / "pki"
    generate_certs(pki)
    ca_key, ca_cert = load_ca(pki)
    key, cert = issue_leaf(datetime.datetime.now(datetime.UTC), ca_key, ca_cert, common_name="towline-archive",
                           server_names=(f"{SERVICE}.{system}.svc",), server_ips=(plane.address,))
    write_key_pair(work / "tls.crt", work / "tls.key", key, cert)
    (work / "archive.json").write_text(the_archive(namespace).to_json())
    port = free_loopback_port()
    process = spawn([sys.executable, "-m", "tests.integration.archive.api_server_process",
                     "--kubeconfig", str(operator_kubeconfig(plane, work / "kubeconfig", system, ARCHIVE_SA)),
                     "--archive", str(work / "archive.json"), "--cert", str(work / "tls.crt"),
                     "--key", str(work / "tls.key"), "--address", plane.address, "--port", str(port)],
                    log_path=work / "archive-api.log", cwd=REPO_ROOT)
    try:
        wait_for("the archive API to serve /healthz", lambda: _health(plane.address, port, pki / "ca.crt")
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


def _health(address: str, port: int, ca: Path) -> bool:
    try:
        connection = http.client.HTTPSConnection(address, port, timeout=2,
                                                 context=ssl.create_default_context(cafile=str(ca)))
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False


def token_of(plane: ControlPlane, user: str) -> str:
    config = yaml.safe_load(plane.kubeconfig.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name(user))
    return str(next(u["user"]["token"] for u in config["users"] if u["name"] == context["user"]))


def test_who_may_read_workflowruns_sees_the_archived_runs_and_who_may_not_is_forbidden(registered: Registered) -> None:
    plane, namespace = registered.plane, registered.namespace
    table = plane.kubectl("get", "archivedruns.archive.towline.dev", "-n", namespace, user="alice").stdout
    lines = table.splitlines()
    assert lines[0].split()[:5] == ["NAME", "WORKFLOW", "PHASE", "REQUESTER", "APPROVERS"], table
    assert [line.split()[0] for line in lines[1:]] == ["deploy-prod-2", "deploy-prod-1"]
    listed = yaml.safe_load(plane.kubectl("get", "archivedruns", "-n", namespace, "-o", "yaml", user="carol").stdout)
    first = next(item for item in listed["items"] if item["metadata"]["name"] == "deploy-prod-1")
    assert first["kind"] == "ArchivedRun" and first["approvers"] == ["bob"] and first["requester"] == "carol"
    one = yaml.safe_load(plane.kubectl("get", "archivedrun", "deploy-prod-1", "-n", namespace, "-o", "yaml",
                                       user="carol").stdout)
    assert one["record"]["run"]["metadata"]["name"] == "deploy-prod-1"

    refused = plane.kubectl("get", "archivedruns", "-n", namespace, user="bob", check=False)
    assert refused.returncode != 0 and "Forbidden" in refused.stderr
    assert f'list workflowruns.towline.dev in the namespace "{namespace}"' in refused.stderr
    single = plane.kubectl("get", "archivedrun", "deploy-prod-1", "-n", namespace, user="bob", check=False)
    assert single.returncode != 0 and "Forbidden" in single.stderr
    everywhere = plane.kubectl("get", "archivedruns", "--all-namespaces", user="alice", check=False)
    assert everywhere.returncode != 0 and "in every namespace" in everywhere.stderr


def test_a_steps_archived_log_takes_get_pods_log_as_well(registered: Registered) -> None:
    plane, namespace = registered.plane, registered.namespace
    path = (f"/apis/archive.towline.dev/v1alpha1/namespaces/{namespace}/archivedruns/deploy-prod-1/log"
            "?step=apply")
    assert plane.kubectl("get", "--raw", path, user="alice").stdout == "applied 3 objects\n"
    for user in ("carol", "bob"):
        refused = plane.kubectl("get", "--raw", path, user=user, check=False)
        assert refused.returncode != 0 and "Forbidden" in refused.stderr, user
    assert "get pods/log" in plane.kubectl("get", "--raw", path, user="carol", check=False).stderr


def test_a_user_header_of_bobs_own_is_never_believed(registered: Registered) -> None:
    plane, namespace = registered.plane, registered.namespace
    path = f"/apis/archive.towline.dev/v1alpha1/namespaces/{namespace}/archivedruns"
    # Through the API server: it authenticates bob by his token and names him, whatever header he adds.
    connection = http.client.HTTPSConnection(plane.address, plane.apiserver_port, timeout=10,
                                             context=ssl.create_default_context(cafile=str(plane.ca_cert)))
    connection.request("GET", path, headers={"Authorization": f"Bearer {token_of(plane, 'bob')}",
                                             "X-Remote-User": "alice", "X-Remote-Group": "system:masters"})
    response = connection.getresponse()
    assert response.status == 403 and 'User "bob"' in json.loads(response.read())["message"]
    # Straight to the archive, past the API server: without the front proxy's certificate nobody is believed.
    direct = http.client.HTTPSConnection(registered.address, registered.port, timeout=10,
                                         context=ssl.create_default_context(cafile=str(registered.ca)))
    direct.request("GET", path, headers={"X-Remote-User": "alice", "X-Remote-Group": "system:masters"})
    answer = direct.getresponse()
    assert answer.status == 401 and json.loads(answer.read())["reason"] == "Unauthorized"
