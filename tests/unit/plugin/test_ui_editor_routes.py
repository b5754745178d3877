"""The editor's routes on a real local server, behind a door that admits one person with an API client that records
every call: what is refused is refused before any API call, a validation is a dry run naming the field manager,
an apply is a server-side apply without force, and a refusal keeps the API server's words at its field."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx
import yaml
from aiohttp import web

from towline.jsontypes import JSON
from towline.k8s.client import ApiError, KubeApi
from towline.plugin.ui import person
from towline.plugin.ui.server import build_app_behind

WORKFLOWS = "/apis/towline.dev/v1alpha1/namespaces/team/workflows"
DOCUMENT = {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "deploy"},
            "spec": {"steps": [{"id": "call", "action": "http.request", "with": {"url": "https://api.example.com/"}}]}}
TEXT = yaml.safe_dump(DOCUMENT, sort_keys=False)


class RecordingApi:
    """The API server as the person sees it: no step types, a live Workflow (or none), applies that may be refused."""

    def __init__(self, live: JSON | None = None, refusal: ApiError | None = None) -> None:
        self.calls: list[tuple[str, str, JSON]] = []
        self.live, self.refusal = live, refusal

    async def get(self, path: str) -> JSON | None:
        self.calls.append(("GET", path, {}))
        return self.live if path == f"{WORKFLOWS}/deploy" else None

    async def list(self, path: str, **_: Any) -> list[JSON]:
        self.calls.append(("LIST", path, {}))
        return []

    async def request(self, method: str, path: str, *, body: JSON | None = None, query: JSON | None = None,
                      content_type: str = "application/json", **_: Any) -> JSON:
        self.calls.append((method, path, {"query": query or {}, "contentType": content_type, "body": body}))
        if path.endswith("selfsubjectaccessreviews"):
            return {"status": {"allowed": True}}
        if self.refusal is not None:
            raise self.refusal
        return {**(body or {}), "metadata": {**(body or {}).get("metadata", {}), "resourceVersion": "7"}}

    def applies(self) -> list[JSON]:
        return [call for method, path, call in self.calls if method == "PATCH"]


class OnePerson:
    def __init__(self, api: RecordingApi) -> None:
        self.api = api

    async def admit(self, request: web.Request) -> person.Person:
        return person.Person(api=cast(KubeApi, self.api), user="alice", csrf="token", default_namespace="team")


Probe = Callable[[httpx.AsyncClient], Awaitable[None]]


def serve(api: RecordingApi, probe: Probe, *, allow_apply: bool) -> None:
    async def main() -> None:
        runner = web.AppRunner(build_app_behind(OnePerson(api), allow_apply=allow_apply))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                         headers={person.CSRF_HEADER: "token"}) as client:
                await probe(client)
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_apply_while_it_is_off_is_refused_before_any_api_call() -> None:
    api = RecordingApi()

    async def probe(client: httpx.AsyncClient) -> None:
        answer = await client.post("/api/editor/apply", json={"yaml": TEXT})
        assert answer.status_code == 403 and "ui.editor.allowApply" in answer.json()["message"]

    serve(api, probe, allow_apply=False)
    assert api.calls == []


def test_validate_is_a_dry_run_server_side_apply_as_the_editor() -> None:
    api = RecordingApi()

    async def probe(client: httpx.AsyncClient) -> None:
        answer = await client.post("/api/editor/validate", json={"yaml": TEXT})
        assert answer.json() == {"ok": True, "problems": []}, answer.text

    serve(api, probe, allow_apply=True)
    (applied,) = api.applies()
    assert applied["query"] == {"fieldManager": "towline-editor", "dryRun": "All"}
    assert applied["contentType"] == "application/apply-patch+yaml"
    assert applied["body"]["metadata"] == {"name": "deploy", "namespace": "team"}, "the page's namespace is named"


def test_apply_is_a_server_side_apply_without_force_and_a_refusal_keeps_its_words_at_its_field() -> None:
    api = RecordingApi()

    async def probe(client: httpx.AsyncClient) -> None:
        answer = await client.post("/api/editor/apply", json={"yaml": TEXT})
        assert answer.json() == {"applied": True, "resourceVersion": "7", "generation": None}, answer.text

    serve(api, probe, allow_apply=True)
    (applied,) = api.applies()
    assert applied["query"] == {"fieldManager": "towline-editor"}, "no force, no dry run"

    message = 'Workflow.towline.dev "deploy" is invalid: spec.steps[0].timeoutSeconds: Invalid value: 0'
    refused = RecordingApi(refusal=ApiError(422, message, {"kind": "Status", "details": {"causes": [
        {"field": "spec.steps[0].timeoutSeconds", "message": "Invalid value: 0: must be at least 1"}]}}))

    async def refused_probe(client: httpx.AsyncClient) -> None:
        answer = await client.post("/api/editor/apply", json={"yaml": TEXT})
        assert answer.status_code == 422
        assert answer.json() == {"applied": False, "problems": [{
            "path": "spec.steps[0].timeoutSeconds", "message": "Invalid value: 0: must be at least 1",
            "source": "schema"}]}

    serve(refused, refused_probe, allow_apply=True)


def test_a_gitops_managed_live_workflow_is_refused_before_any_write() -> None:
    live = {**DOCUMENT, "metadata": {"name": "deploy", "namespace": "team",
                                     "labels": {"kustomize.toolkit.fluxcd.io/name": "apps"}}}
    api = RecordingApi(live=live)

    async def probe(client: httpx.AsyncClient) -> None:
        answer = await client.post("/api/editor/apply", json={"yaml": TEXT})
        assert answer.status_code == 409 and "managed by Flux" in answer.json()["message"]
        shown = (await client.get("/api/editor/workflows/deploy")).json()
        assert shown["managedBy"] == "flux" and shown["canApply"] is False

    serve(api, probe, allow_apply=True)
    assert api.applies() == []


def test_bad_bodies_are_refused_naming_the_fix_before_any_api_call() -> None:
    api = RecordingApi()

    async def probe(client: httpx.AsyncClient) -> None:
        for body in (b"not json", b'{"yaml": 3}', b"[]"):
            answer = await client.post("/api/editor/validate", content=body)
            assert answer.status_code == 400 and '{"yaml"' in answer.json()["message"], answer.text
        big = await client.post("/api/editor/validate", content=b"x" * (1024 * 1024 + 1))
        assert big.status_code == 413 and "1 MiB" in big.json()["message"]
        against = await client.post("/api/editor/diff", json={"yaml": TEXT, "against": "elsewhere"})
        assert against.status_code == 400 and '"live" or "text"' in against.json()["message"]
        named = await client.get("/api/editor/workflows/Not_A_Name")
        assert named.status_code == 400

    serve(api, probe, allow_apply=True)
    assert api.calls == []


def test_a_diff_against_an_uploaded_file_ignores_how_it_was_written() -> None:
    api = RecordingApi()
    flow = ("apiVersion: towline.dev/v1alpha1\nkind: Workflow\nmetadata: {name: deploy}\nspec: {steps: [{id: call, "
            "action: http.request, with: {url: 'https://api.example.com/'}}]}  # from the checkout\n")

    async def probe(client: httpx.AsyncClient) -> None:
        same = (await client.post("/api/editor/diff", json={"yaml": TEXT, "against": "text", "text": flow})).json()
        assert same == {"diff": "", "same": True}
        changed = TEXT.replace("api.example.com/", "api.example.com/v2")
        other = (await client.post("/api/editor/diff", json={"yaml": changed, "against": "text", "text": flow}))
        assert other.json()["same"] is False and "+      url: https://api.example.com/v2" in other.json()["diff"]

    serve(api, probe, allow_apply=True)
    assert api.calls == []
