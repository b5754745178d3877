"""The web view's start-a-run and run-operation handlers on a real local server, behind a door that admits one
person with an API client that records every call: a refused form makes no API write, a run is created with
`requestedBy` from the API server's own answer, and a refusal reaches the page in the API server's words."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx
from aiohttp import web

from towline.jsontypes import JSON
from towline.k8s.client import ApiError, KubeApi
from towline.plugin.ui import person
from towline.plugin.ui.server import build_app_behind

RUNS = "/apis/towline.dev/v1alpha1/namespaces/team/workflowruns"
WORKFLOW = {"metadata": {"name": "report", "namespace": "team"}, "spec": {"params": [
    {"name": "region", "type": "string", "required": True}, {"name": "days", "type": "integer", "default": 7}]}}


class RecordingApi:
    """The API server as the person sees it: who they are, the Workflow, and a create that may be refused."""

    def __init__(self, refusal: ApiError | None = None) -> None:
        self.writes: list[tuple[str, str, JSON]] = []
        self.refusal = refusal

    async def get(self, path: str) -> JSON | None:
        return WORKFLOW if path.endswith("/workflows/report") else None

    async def request(self, method: str, path: str, *, body: JSON | None = None, **_: Any) -> JSON:
        if path.endswith("selfsubjectreviews"):
            return {"status": {"userInfo": {"username": "alice"}}}
        self.writes.append((method, path, body or {}))
        if self.refusal is not None:
            raise self.refusal
        return {**(body or {}), "metadata": {"name": "report-x1"}}


class OnePerson:
    def __init__(self, api: RecordingApi) -> None:
        self.api = api

    async def admit(self, request: web.Request) -> person.Person:
        return person.Person(api=cast(KubeApi, self.api), user="alice", csrf="token", default_namespace="team")


Probe = Callable[[httpx.AsyncClient], Awaitable[None]]


def serve(api: RecordingApi, probe: Probe, token: str | None = "token") -> None:
    async def main() -> None:
        runner = web.AppRunner(build_app_behind(OnePerson(api)))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                         headers={person.CSRF_HEADER: token} if token else {}) as client:
                await probe(client)
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_a_refused_form_names_each_field_and_writes_nothing() -> None:
    api = RecordingApi()

    async def probe(client: httpx.AsyncClient) -> None:
        answer = await client.post("/api/workflows/report/runs", json={"params": {"days": "a week"}})
        assert answer.status_code == 400
        fields = answer.json()["fields"]
        assert set(fields) == {"region", "days"} and "required" in fields["region"]
        assert "nothing was created" in answer.json()["message"]

    serve(api, probe)
    assert api.writes == []


def test_a_started_run_is_requested_by_whom_the_api_server_says_the_person_is() -> None:
    api = RecordingApi()

    async def probe(client: httpx.AsyncClient) -> None:
        answer = await client.post("/ns/team/api/workflows/report/runs",
                                   json={"params": {"region": "emea", "requestedBy": "mallory"}})
        assert answer.status_code == 400, "an undeclared param is refused, not passed on"
        answer = await client.post("/api/workflows/report/runs", json={"params": {"region": "emea", "days": "3"}})
        assert answer.status_code == 201 and answer.json()["run"] == "report-x1"

    serve(api, probe)
    ((method, path, body),) = api.writes
    assert (method, path) == ("POST", RUNS)
    assert body["spec"] == {"workflowRef": {"name": "report"}, "params": {"region": "emea", "days": 3},
                            "requestedBy": "alice"}


def test_the_api_servers_refusal_reaches_the_page_in_its_words() -> None:
    words = 'workflowruns.towline.dev is forbidden: User "carol" cannot create resource "workflowruns"'
    api = RecordingApi(ApiError(403, words))

    async def probe(client: httpx.AsyncClient) -> None:
        answer = await client.post("/api/workflows/report/runs", json={"params": {"region": "emea"}})
        assert answer.status_code == 403 and answer.json()["message"] == words
        unknown = await client.post("/api/runs/report-x1/explode", json={})
        assert unknown.status_code == 404 and "one of cancel" in unknown.json()["message"]
        bad_name = await client.post("/api/runs/Not_A_Name/cancel", json={})
        assert bad_name.status_code == 400 and "not a Kubernetes object name" in bad_name.json()["message"]

    serve(api, probe)


def test_a_write_without_the_pages_token_is_refused_before_any_api_call() -> None:
    api = RecordingApi()

    async def probe(client: httpx.AsyncClient) -> None:
        for path, body in (("/api/workflows/report/runs", {"params": {"region": "emea"}}),
                           ("/api/runs/report-x1/cancel", {}), ("/api/runs/report-x1/retry", {})):
            answer = await client.post(path, json=body)
            assert answer.status_code == 403 and person.CSRF_HEADER in answer.text, (path, answer.text)

    serve(api, probe, token=None)
    serve(api, probe, token="not-the-token")
    assert api.writes == []


class FailedRunApi(RecordingApi):
    """As RecordingApi, with a failed run report-x1 of Workflow report to retry."""

    async def get(self, path: str) -> JSON | None:
        if path.endswith("/workflowruns/report-x1"):
            return {"metadata": {"name": "report-x1", "namespace": "team"},
                    "spec": {"workflowRef": {"name": "report"}, "params": {"region": "emea"}},
                    "status": {"phase": "Failed", "workflowSpec": {"generation": 1, "steps": []}}}
        return await super().get(path)


def test_a_retrys_bad_options_are_named_at_their_fields_and_write_nothing() -> None:
    api = FailedRunApi()

    async def probe(client: httpx.AsyncClient) -> None:
        answer = await client.post("/api/runs/report-x1/retry",
                                   json={"workflowChanged": "yes", "params": {"days": "a week"}})
        assert answer.status_code == 400 and "nothing was created" in answer.json()["message"]
        fields = answer.json()["fields"]
        assert "true or false" in fields["workflowChanged"] and "whole number" in fields["days"], fields
        not_options = await client.post("/api/runs/report-x1/retry", json={"reuse": ["everything"]})
        assert not_options.status_code == 400 and "no retry option reuse" in not_options.json()["message"]

    serve(api, probe)
    assert api.writes == []
