"""The archive's read API through the real API server: registered as the aggregated API archive.towline.dev (the
chart's RBAC for it, a Service without selector and an EndpointSlice pointing at the API process on the node
address), read with kubectl as the people of the local control plane. Who sees what is decided by the API server's
own RBAC, asked by SubjectAccessReview: `get/list workflowruns` for the runs, `get pods/log` as well for a log.

Exclusive: an APIService is cluster-wide (one archive.towline.dev per cluster), and while it is registered every
discovery on the cluster goes through it."""

from __future__ import annotations

import datetime
import http.client
import json
import ssl
from collections.abc import Iterator

import pytest
import yaml
from tests.archivereader import MemoryArchive, archived_run, log_entry
from tests.integration.archive.registration import Registered, registered_archive_api

from towline_dev.controlplane import ControlPlane
from towline_dev.kubeconfig import context_name
from towline_dev.node.realnode import NodeCluster

pytestmark = pytest.mark.exclusive


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
    with registered_archive_api(plane, tmp_path_factory.mktemp("archive-api"), "t-archive-api", the_archive) as api:
        yield api


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
