"""The archive's aggregated API over real TLS: discovery, Tables for kubectl, filters and paging, and whom it
believes. The records come from an archive in memory; authorization from a table of rights standing in for the
API server's authorizer (the real one answers in tests/integration/archive/test_archive_api_access.py)."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from tests.archivereader import T0, MemoryArchive, archived_run, log_entry

from towline.archive.apiauth import FrontProxyConfig, Question, UserInfo, server_ssl_context
from towline.archive.apiserver import ArchiveApi
from towline_dev.certs import ControlPlaneCerts, generate_certs

KUBECTL_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
                  "g=meta.k8s.io,application/json")
NS, OTHER = "team-a", "team-b"


@dataclass
class Rights:
    """(user, verb, group, resource/subresource, namespace) a person holds; namespace "" is every namespace."""

    held: set[tuple[str, str, str, str, str]] = field(default_factory=set)
    asked: list[tuple[UserInfo, Question]] = field(default_factory=list)

    def grant(self, user: str, verb: str, group: str, resource: str, namespace: str) -> None:
        self.held.add((user, verb, group, resource, namespace))

    async def allowed(self, user: UserInfo, question: Question) -> bool:
        self.asked.append((user, question))
        resource = f"{question.resource}/{question.subresource}" if question.subresource else question.resource
        return any((user.name, question.verb, question.group, resource, ns) in self.held
                   for ns in {question.namespace, ""})


@dataclass
class Served:
    port: int
    certs: ControlPlaneCerts
    forged: ControlPlaneCerts
    rights: Rights
    archive: MemoryArchive
    api: ArchiveApi

    def request(self, path: str, *, user: str | None = "alice", groups: tuple[str, ...] = (),
                client: str = "front-proxy", accept: str = "application/json", method: str = "GET",
                headers: dict[str, str] | None = None) -> tuple[int, str, str]:
        context = ssl.create_default_context(cafile=str(self.certs.ca_cert))
        if client == "front-proxy":
            context.load_cert_chain(self.certs.front_proxy_client_cert, self.certs.front_proxy_client_key)
        elif client == "forged":  # same common name, another CA
            context.load_cert_chain(self.forged.front_proxy_client_cert, self.forged.front_proxy_client_key)
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=10)
        sent = {"Accept": accept, **(headers or {})}
        if user is not None:
            sent["X-Remote-User"] = user
        connection.putrequest(method, path)
        for name, value in sent.items():
            connection.putheader(name, value)
        for group in groups:
            connection.putheader("X-Remote-Group", group)
        connection.endheaders()
        response = connection.getresponse()
        body = response.read().decode()
        connection.close()
        return response.status, response.getheader("Content-Type") or "", body

    def get_json(self, path: str, **options: Any) -> tuple[int, Any]:
        status, _, body = self.request(path, **options)
        return status, json.loads(body)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    certs, forged = generate_certs(tmp_path / "plane"), generate_certs(tmp_path / "elsewhere")
    config = FrontProxyConfig(client_ca_pem=certs.front_proxy_ca_cert.read_text(),
                              allowed_names=("front-proxy-client",))
    rights, archive = Rights(), MemoryArchive()
    api = ArchiveApi(archive, rights, config)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(api.app())
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0,
                       ssl_context=server_ssl_context(certs.serving_cert, certs.serving_key, config))
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield Served(port, certs, forged, rights, archive, api)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def three_runs(archive: MemoryArchive) -> None:
    archive.add(archived_run(NS, "deploy-1", seq=1, started=T0, approvers=("bob",), labels={"env": "prod"}))
    archive.add(archived_run(NS, "deploy-2", seq=3, started=T0 + timedelta(days=1), phase="Failed"))
    archive.add(archived_run(NS, "report-1", seq=5, workflow="report", requester="dave",
                             started=T0 + timedelta(days=2), labels={"env": "dev"}))
    archive.add(archived_run(OTHER, "deploy-1", seq=1, started=T0))


def test_discovery_names_archivedruns_namespaced_with_get_and_list_and_its_log_subresource(served: Served) -> None:
    # Anyone: the API server's availability check reads discovery without a person behind it.
    status, groups = served.get_json("/apis", client="none", user=None)
    assert status == 200 and groups["groups"][0]["preferredVersion"]["groupVersion"] == "archive.towline.dev/v1alpha1"
    status, resources = served.get_json("/apis/archive.towline.dev/v1alpha1", client="none", user=None)
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["archivedruns"]["namespaced"] is True and by_name["archivedruns"]["verbs"] == ["get", "list"]
    assert by_name["archivedruns"]["kind"] == "ArchivedRun" and by_name["archivedruns/log"]["verbs"] == ["get"]
    assert served.request("/healthz", client="none", user=None)[:1] == (200,)


def test_kubectl_gets_a_table_of_the_namespaces_runs_newest_first(served: Served) -> None:
    three_runs(served.archive)
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", NS)
    status, table = served.get_json(f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns",
                                    accept=KUBECTL_ACCEPT)
    assert status == 200 and table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:6] == ["Name", "Workflow", "Phase", "Requester", "Approvers", "Started"]
    assert [row["cells"][0] for row in table["rows"]] == ["report-1", "deploy-2", "deploy-1"]
    assert table["rows"][2]["cells"][4] == "bob"
    assert table["rows"][0]["object"]["metadata"]["namespace"] == NS


def test_a_list_without_a_table_is_an_archived_run_list_filtered_by_the_query(served: Served) -> None:
    three_runs(served.archive)
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", NS)
    base = f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns"

    def names(query: str) -> list[str]:
        status, body = served.get_json(f"{base}?{query}")
        assert status == 200 and body["kind"] == "ArchivedRunList", body
        return [item["metadata"]["name"] for item in body["items"]]

    assert names("workflow=deploy") == ["deploy-2", "deploy-1"]
    assert names("approver=bob") == ["deploy-1"]
    assert names("requester=dave") == ["report-1"]
    assert names("phase=Failed") == ["deploy-2"]
    assert names("labelSelector=env%3Dprod") == ["deploy-1"]
    assert names("since=2025-07-02T00:00:00Z&until=2025-07-03T00:00:00Z") == ["deploy-2"]
    _, one = served.get_json(f"{base}?approver=bob")
    item = one["items"][0]
    assert item["apiVersion"] == "archive.towline.dev/v1alpha1" and item["kind"] == "ArchivedRun"
    assert item["approvers"] == ["bob"] and item["chain"]["seq"] == 1 and item["record"]["run"]["kind"] == "WorkflowRun"


def test_pages_follow_limit_and_continue(served: Served) -> None:
    three_runs(served.archive)
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", NS)
    base = f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns"
    _, first = served.get_json(f"{base}?limit=2")
    _, second = served.get_json(f"{base}?limit=2&continue={first['metadata']['continue']}")
    assert [i["metadata"]["name"] for i in first["items"] + second["items"]] == ["report-1", "deploy-2", "deploy-1"]
    assert "continue" not in second["metadata"]


def test_user_headers_without_the_front_proxy_certificate_are_not_believed(served: Served) -> None:
    three_runs(served.archive)
    served.rights.grant("admin", "list", "towline.dev", "workflowruns", "")
    status, body = served.get_json(f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns",
                                   client="none", user="admin", groups=("system:masters",))
    assert status == 401 and body["kind"] == "Status" and body["reason"] == "Unauthorized"
    assert served.rights.asked == [], "nobody was even asked about"


def test_a_front_proxy_certificate_of_another_ca_fails_the_handshake(served: Served) -> None:
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        served.request(f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns", client="forged",
                       user="admin")


def test_a_certificate_of_the_ca_with_a_name_not_allowed_is_not_believed(served: Served) -> None:
    served.api.front_proxy = FrontProxyConfig(client_ca_pem=served.certs.front_proxy_ca_cert.read_text(),
                                              allowed_names=("aggregator",))
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", NS)
    status, _ = served.get_json(f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns")
    assert status == 401


def test_without_list_workflowruns_the_list_is_forbidden_naming_the_right(served: Served) -> None:
    three_runs(served.archive)
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", OTHER)
    status, body = served.get_json(f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns",
                                   groups=("team-a",))
    assert status == 403 and body["reason"] == "Forbidden"
    assert 'User "alice" cannot list' in body["message"]
    assert f'list workflowruns.towline.dev in the namespace "{NS}"' in body["message"]
    user, question = served.rights.asked[-1]
    assert user.groups == ("team-a",) and question == Question("list", "towline.dev", "workflowruns", NS)


def test_one_run_needs_get_workflowruns_and_an_unknown_one_is_not_found(served: Served) -> None:
    three_runs(served.archive)
    path = f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns"
    assert served.get_json(f"{path}/deploy-1")[0] == 403
    served.rights.grant("alice", "get", "towline.dev", "workflowruns", NS)
    status, run = served.get_json(f"{path}/deploy-1")
    assert status == 200 and run["metadata"]["uid"] == f"uid-{NS}-deploy-1" and run["workflow"] == "deploy"
    status, missing = served.get_json(f"{path}/nothing-like-it")
    assert status == 404 and missing["reason"] == "NotFound" and "nothing-like-it" in missing["message"]


def test_a_steps_log_needs_get_pods_log_as_well(served: Served) -> None:
    run = served.archive.add(archived_run(NS, "deploy-1", seq=1),
                             log_entry(NS, archived_run(NS, "deploy-1", seq=1), "apply", "applied 3 objects\n",
                                       seq=2))
    path = f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns/{run.name}/log?step=apply"
    served.rights.grant("alice", "get", "towline.dev", "workflowruns", NS)
    status, body = served.get_json(path)
    assert status == 403 and "get pods/log" in body["message"]
    served.rights.grant("alice", "get", "", "pods/log", NS)
    status, content_type, text = served.request(path)
    assert (status, content_type.split(";")[0], text) == (200, "text/plain", "applied 3 objects\n")
    assert served.get_json(path.replace("step=apply", "step=other"))[0] == 404


def test_every_namespace_takes_the_right_to_list_runs_in_every_namespace(served: Served) -> None:
    three_runs(served.archive)
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", NS)
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", OTHER)
    path = "/apis/archive.towline.dev/v1alpha1/archivedruns"
    status, body = served.get_json(path)
    assert status == 403 and "in every namespace" in body["message"]
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", "")
    seen, token = [], ""
    while True:
        status, page = served.get_json(f"{path}?limit=3" + (f"&continue={token}" if token else ""))
        assert status == 200
        seen += [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in page["items"]]
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert seen == [(NS, "report-1"), (NS, "deploy-2"), (NS, "deploy-1"), (OTHER, "deploy-1")]


@pytest.mark.parametrize(("query", "named"), [
    ("limit=0", "limit"), ("limit=501", "limit"), ("since=yesterday", "since"), ("until=2025-07-01", "until"),
    ("labelSelector=env!%3Dprod", "labelSelector"), ("fieldSelector=metadata.name%3Dx", "fieldSelector"),
    ("continue=not-a-token", "continue"),
])
def test_a_bad_query_is_a_bad_request_naming_the_parameter(served: Served, query: str, named: str) -> None:
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", NS)
    status, body = served.get_json(f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns?{query}")
    assert status == 400 and body["kind"] == "Status" and named in body["message"]


def test_the_archive_is_read_only(served: Served) -> None:
    served.rights.grant("alice", "list", "towline.dev", "workflowruns", NS)
    for method in ("POST", "DELETE", "PATCH"):
        status, _, body = served.request(f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns/x",
                                         method=method)
        assert status == 405 and json.loads(body)["reason"] == "MethodNotAllowed"
    status, body = served.get_json(f"/apis/archive.towline.dev/v1alpha1/namespaces/{NS}/archivedruns?watch=true")
    assert status == 405 and "watch" in body["message"]
