"""The web view's History page on a real local server, with an API client that answers the archive's paths.

The archive's API itself (RBAC through SubjectAccessReview, behind the real API server) is tested in
tests/integration/archive; here: what the page asks of it as the person (filters, paging, one run, a step's log),
how the kept run becomes the run page's own view, and how each refusal reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx
from aiohttp import web

from towline.jsontypes import JSON
from towline.k8s.client import ApiError, KubeApi
from towline.plugin.ui import guard, history
from towline.plugin.ui.server import SETTINGS, build_app

BASE = "/apis/archive.towline.dev/v1alpha1/namespaces/team/archivedruns"


def kept_run() -> JSON:
    """A run as the archive keeps it (record.run): the live WorkflowRun's shape."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
        "metadata": {"name": "deploy-1", "namespace": "team", "uid": "u-1", "labels": {"env": "prod"}},
        "spec": {"workflowRef": {"name": "deploy"}, "requestedBy": "carol", "trigger": {"type": "webhook"},
                 "params": {"ref": "v1.2"}},
        "status": {
            "phase": "Succeeded", "startedAt": "2026-07-01T10:00:00Z", "finishedAt": "2026-07-01T10:05:00Z",
            "params": {"ref": "v1.2"},
            "workflowSpec": {"steps": [
                {"id": "build", "action": "http.request", "with": {"url": "https://ci.example/<b>"}},
                {"id": "review", "needs": ["build"], "approval": {"message": "ship?"}},
                {"id": "ship", "needs": ["review"], "action": "http.request"},
            ]},
            "steps": [
                {"id": "build", "phase": "Succeeded", "attempt": 1, "output": {"n": 1}},
                {"id": "review", "phase": "Succeeded", "approvalName": "deploy-1-review", "decidedBy": "bob"},
                {"id": "ship", "phase": "Succeeded", "attempt": 1},
            ],
        },
    }


def archived(name: str = "deploy-1") -> JSON:
    approval = {"metadata": {"name": "deploy-1-review"},
                "spec": {"runName": "deploy-1", "step": "review", "message": "ship <v1.2>?",
                         "messageFromInputs": True, "decision": "Approved", "decidedBy": "bob",
                         "reason": "looks right", "requestedBy": "carol"},
                "status": {"phase": "Approved", "decidedAt": "2026-07-01T10:03:00Z"}}
    return {
        "apiVersion": "archive.towline.dev/v1alpha1", "kind": "ArchivedRun",
        "metadata": {"name": name, "namespace": "team", "uid": "u-1", "labels": {"env": "prod"}},
        "workflow": "deploy", "phase": "Succeeded", "requester": "carol", "approvers": ["bob"],
        "startedAt": "2026-07-01T10:00:00Z", "finishedAt": "2026-07-01T10:05:00Z",
        "chain": {"seq": 7, "digest": "ab" * 32, "prevDigest": "cd" * 32, "recordedAt": "2026-07-01T10:05:01Z"},
        "record": {"run": kept_run(), "approvals": [approval],
                   "logs": [{"key": "k", "digest": "d", "step": "build", "attempt": 1, "container": "step",
                             "truncated": False}],
                   "deletedBeforeItEnded": False},
    }


class ArchiveApi:
    """Answers the archive's paths as the API server would pass on the archive's answers; records every call."""

    def __init__(self, refusal: ApiError | None = None) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.refusal = refusal

    async def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                      **_: Any) -> JSON:
        self.calls.append((path, dict(query or {})))
        if self.refusal is not None:
            raise self.refusal
        if path == BASE:
            return {"kind": "ArchivedRunList", "metadata": {"continue": "next-7"}, "items": [archived()]}
        if path == f"{BASE}/deploy-1":
            return archived()
        raise ApiError(404, 'archivedruns.archive.towline.dev "x" not found in the archive of namespace "team"',
                       {"details": {"group": "archive.towline.dev"}})

    async def read_text(self, path: str, *, query: dict[str, str] | None = None) -> str:
        self.calls.append((path, dict(query or {})))
        if self.refusal is not None:
            raise self.refusal
        return "building <v1.2>\ndone\n"


Check = Callable[[httpx.AsyncClient, str], Awaitable[None]]


def serving(api: ArchiveApi, check: Check) -> None:
    async def run() -> None:
        launch = guard.Launch(asyncio.get_running_loop().time)
        app = build_app(cast(KubeApi, api), namespace="team", user="dave", launch=launch)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        app[SETTINGS]["port"] = port
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=base) as browser:
                assert (await browser.get(f"/login?code={launch.code}")).status_code == 303
                await check(browser, base)
        finally:
            await runner.cleanup()

    asyncio.run(run())


def test_the_list_asks_the_archive_with_every_history_filter_and_the_continue_token() -> None:
    api = ArchiveApi()

    async def check(browser: httpx.AsyncClient, _: str) -> None:
        answer = await browser.get("/api/history", params={
            "workflow": "deploy", "requester": "carol", "approver": "bob", "phase": "Succeeded",
            "since": "2026-07-01T00:00:00Z", "until": "2026-10-01T00:00:00Z", "labelSelector": "env=prod",
            "limit": "20", "continue": "page-2", "fieldSelector": "dropped"})
        assert answer.status_code == 200
        body = answer.json()
        assert body["continue"] == "next-7"
        row = body["runs"][0]
        assert (row["name"], row["workflow"], row["phase"], row["requestedBy"], row["approvers"]) == (
            "deploy-1", "deploy", "Succeeded", "carol", ["bob"])
        assert row["trigger"] == "webhook" and row["chain"]["seq"] == 7 and row["labels"] == {"env": "prod"}
        assert "record" not in row, "a list row carries the columns, not the whole record"

    serving(api, check)
    assert api.calls == [(BASE, {
        "workflow": "deploy", "requester": "carol", "approver": "bob", "phase": "Succeeded",
        "since": "2026-07-01T00:00:00Z", "until": "2026-10-01T00:00:00Z", "labelSelector": "env=prod",
        "limit": "20", "continue": "page-2"})]


def test_an_archived_run_is_the_run_pages_view_of_the_kept_run_with_its_approvals_and_logs() -> None:
    api = ArchiveApi()

    async def check(browser: httpx.AsyncClient, _: str) -> None:
        run = (await browser.get("/api/history/deploy-1")).json()
        assert run["archived"] is True and run["name"] == "deploy-1" and run["phase"] == "Succeeded"
        assert [(s["id"], s["needs"], s["phase"]) for s in run["steps"]] == [
            ("build", [], "Succeeded"), ("review", ["build"], "Succeeded"), ("ship", ["review"], "Succeeded")]
        assert run["steps"][0]["inputs"] == {"url": "https://ci.example/<b>"}, "inputs as recorded, unescaped JSON"
        assert run["params"] == {"ref": "v1.2"} and run["requestedBy"] == "carol"
        [approval] = run["approvals"]
        assert (approval["decidedBy"], approval["reason"], approval["decision"], approval["decidedAt"]) == (
            "bob", "looks right", "Approved", "2026-07-01T10:03:00Z")
        assert approval["messageFromInputs"] is True
        assert run["logs"] == [{"step": "build", "attempt": 1, "container": "step", "truncated": False}]
        log = await browser.get("/api/history/deploy-1/log", params={"step": "build"})
        assert log.status_code == 200 and log.text == "building <v1.2>\ndone\n"
        assert log.headers["Content-Type"].startswith("text/plain")
        assert log.headers["X-Content-Type-Options"] == "nosniff"

    serving(api, check)
    assert api.calls == [(f"{BASE}/deploy-1", {}), (f"{BASE}/deploy-1/log", {"step": "build"})]


def test_a_refusal_names_the_right_the_person_lacks() -> None:
    said = ('archivedruns is forbidden: User "dave" cannot list resource "archivedruns" in API group '
            '"archive.towline.dev" in the namespace "team": the archive shows it to whoever may list workflowruns')
    api = ArchiveApi(ApiError(403, said))

    async def check(browser: httpx.AsyncClient, _: str) -> None:
        listed = await browser.get("/api/history")
        assert listed.status_code == 403
        body = listed.json()
        assert body["problem"] == "forbidden" and body["right"] == "list workflowruns (towline.dev)"
        assert "dave may not list archived runs in namespace team" in body["message"]
        assert said in body["message"], "the API server's own words are kept"
        log = await browser.get("/api/history/deploy-1/log", params={"step": "build"})
        assert log.status_code == 403 and log.json()["right"] == "get workflowruns (towline.dev) and get pods/log"

    serving(api, check)


def test_an_unserved_group_reads_as_the_archive_not_installed() -> None:
    api = ArchiveApi(ApiError(404, "the server could not find the requested resource"))

    async def check(browser: httpx.AsyncClient, _: str) -> None:
        for path in ("/api/history", "/api/history/deploy-1", "/api/history/deploy-1/log?step=build"):
            answer = await browser.get(path)
            assert answer.status_code == 404 and answer.json()["problem"] == "not-installed", path
            assert "archive is not installed" in answer.json()["message"]

    serving(api, check)


def test_the_archives_own_not_found_is_not_mistaken_for_a_missing_archive() -> None:
    no_log = ApiError(404, 'the archive holds no log of step "review" of the run "deploy-1" in the namespace "team"')
    no_run = ApiError(404, 'archivedruns.archive.towline.dev "gone" not found in the archive of namespace "team"',
                      {"details": {"group": "archive.towline.dev"}})
    for refusal in (no_log, no_run):
        status, body = history.refusal(refusal, user="dave", namespace="team", action="log")
        assert (status, body["problem"], body["message"]) == (404, "not-found", refusal.message)
    status, body = history.refusal(ApiError(503, "service unavailable"), user="dave", namespace="team",
                                   action="list")
    assert status == 503 and body["problem"] == "unavailable" and "does not answer" in body["message"]


def test_bad_input_is_refused_naming_the_field_before_any_call() -> None:
    api = ArchiveApi()

    async def check(browser: httpx.AsyncClient, _: str) -> None:
        for limit in ("0", "501", "ten"):
            answer = await browser.get("/api/history", params={"limit": limit})
            assert answer.status_code == 400 and answer.json()["message"].startswith(f"limit={limit!r}")
        answer = await browser.get("/api/history", params={"workflow": "w" * 300})
        assert answer.status_code == 400 and answer.json()["message"].startswith("workflow:")
        for name in ("Deploy-1", "a..b", "-x"):
            for path in (f"/api/history/{name}", f"/api/history/{name}/log"):
                answer = await browser.get(path)
                assert answer.status_code == 400 and answer.json()["message"].startswith(f"run name {name!r}"), path
        # A slash in the name (encoded) never becomes another API path: no route, or a refused name.
        assert (await browser.get("/api/history/..%2F..%2Fsecrets")).status_code in {400, 404}

    serving(api, check)
    assert api.calls == [], "nothing reached the API server"


def test_the_pages_need_the_session_and_escape_the_name_they_carry() -> None:
    api = ArchiveApi()

    async def check(browser: httpx.AsyncClient, base: str) -> None:
        page = await browser.get("/history")
        assert page.status_code == 200 and 'data-page="history"' in page.text
        assert '<a href="/history">History</a>' in page.text and "/static/history.js" in page.text
        named = await browser.get("/history/x<img src=x onerror=alert(1)>")
        assert named.status_code == 200 and "<img" not in named.text and "x&lt;img" in named.text
        script = await browser.get("/static/history.js")
        assert script.status_code == 200 and "innerHTML" not in script.text
        async with httpx.AsyncClient(base_url=base) as stranger:
            for path in ("/history", "/history/deploy-1", "/api/history", "/api/history/deploy-1/log"):
                refused = await stranger.get(path)
                assert refused.status_code == 403 and "no session" in refused.text, path

    serving(api, check)
    assert api.calls == []
