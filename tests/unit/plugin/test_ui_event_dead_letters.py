"""The web view's events-sink dead letters (towline.plugin.ui.deadletters): the page lists what
`kubectl towline deadletters -o json` lists and its Replay asks the operator exactly what `replay ID` / `--all` asks,
both with towline.plugin.deadletters' code, as the person; RBAC's refusal of either reaches the page as a 403 that
says what it takes, and nothing is written. The letters live in the operator's namespace the view is given."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx
from aiohttp import web

from towline.api.events import DeadLetter
from towline.jsontypes import JSON
from towline.k8s.client import CONFIG_MAPS, ApiError, KubeApi
from towline.k8s.deadletters import DEAD_LETTERS_CONFIG_MAP, REPLAY_ANNOTATION, letter_text
from towline.plugin import cli, deadletters
from towline.plugin.commands import Io
from towline.plugin.ui import person
from towline.plugin.ui.server import build_app_behind

Probe = Callable[[httpx.AsyncClient], Awaitable[None]]
WRITE = {person.CSRF_HEADER: "token"}


def letter(ident: str, failed_at: str) -> DeadLetter:
    event = {"specversion": "1.0", "id": ident, "type": "dev.towline.run.failed", "source": "/namespaces/team/x",
             "subject": f"workflowruns/{ident}", "data": {"run": ident}}
    return DeadLetter(event=event, attempts=3, error="transient: POST sink failed with HTTP 503",
                      failed_at=failed_at)


class FakeApi:
    """The API server as one person sees the operator namespace's ConfigMap: `may` is what RBAC lets them do to it
    (get, update); a refused call raises the 403 the API server sends, in its words."""

    def __init__(self, may: frozenset[str], operator_namespace: str = "towline-system") -> None:
        self.may, self.namespace = may, operator_namespace
        self.path = CONFIG_MAPS.path(operator_namespace, DEAD_LETTERS_CONFIG_MAP)
        self.config_map: JSON = {
            "metadata": {"name": DEAD_LETTERS_CONFIG_MAP, "namespace": operator_namespace, "resourceVersion": "1"},
            "data": {one.id: letter_text(one) for one in (letter("e1", "2026-12-07T06:00:00Z"),
                                                         letter("e2", "2026-12-07T06:01:00Z"))}}
        self.writes: list[JSON] = []
        self.reviews: list[JSON] = []

    def _refuse(self, verb: str) -> None:
        if verb not in self.may:
            raise ApiError(403, f'configmaps "{DEAD_LETTERS_CONFIG_MAP}" is forbidden: User "carol" cannot {verb} '
                                f'resource "configmaps" in API group "" in the namespace "{self.namespace}"')

    async def get(self, path: str) -> JSON | None:
        if path != self.path:  # the team namespace's own letters (the command lists them too): none
            assert "/namespaces/team/" in path, path
            return None
        self._refuse("get")
        return copy.deepcopy(self.config_map)

    async def replace(self, path: str, body: JSON) -> JSON:
        assert path == self.path, path
        self._refuse("update")
        self.writes.append(copy.deepcopy(body))
        self.config_map = copy.deepcopy(body)
        return body

    async def list(self, path: str, **_: Any) -> list[JSON]:
        assert "/namespaces/team/" in path, path
        return []

    async def request(self, method: str, path: str, *, body: JSON | None = None, **_: Any) -> JSON:
        if "archive.towline.dev" in path:
            raise ApiError(404, "the server could not find the requested resource")
        assert path.endswith("selfsubjectaccessreviews"), path
        assert body is not None
        attributes = body["spec"]["resourceAttributes"]
        self.reviews.append(attributes)
        ours = attributes["namespace"] == self.namespace and attributes["name"] == DEAD_LETTERS_CONFIG_MAP
        return {"status": {"allowed": ours and attributes["verb"] in self.may}}


class OnePerson:
    def __init__(self, api: FakeApi) -> None:
        self.api = api

    async def admit(self, request: web.Request) -> person.Person:
        return person.Person(api=cast(KubeApi, self.api), user="carol", csrf="token", default_namespace="team")


def serve(api: FakeApi, probe: Probe, **options: Any) -> None:
    async def main() -> None:
        runner = web.AppRunner(build_app_behind(OnePerson(api), **options))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{runner.addresses[0][1]}") as client:
                await probe(client)
        finally:
            await runner.cleanup()
    asyncio.run(main())


def command(api: FakeApi, verb: str, ids: list[str], *, everything: bool = False) -> tuple[int, list[str]]:
    out: list[str] = []
    args = argparse.Namespace(verb=verb, ids=ids, all=everything, all_namespaces=False, output="json",
                              operator_namespace=api.namespace)
    code = asyncio.run(deadletters.run(cast(KubeApi, api), Io(out=out.append, err=out.append), args, "team"))
    return code, out


def test_the_page_lists_the_letters_the_command_lists_and_its_replay_asks_what_the_command_asks() -> None:
    by_command = FakeApi(frozenset({"get", "update"}))
    code, listed = command(by_command, "list", [])
    assert code == 0
    code, said = command(by_command, "replay", ["e2"])
    assert code == 0 and said == ["1 dead letter(s) handed to the operator to send again: e2"]

    by_page = FakeApi(frozenset({"get", "update"}))

    async def probe(client: httpx.AsyncClient) -> None:
        page = (await client.get("/api/eventletters")).json()
        command_items = [item for item in json.loads(listed[0])["items"] if item["kind"] == "event"]
        assert page == {"operatorNamespace": "towline-system", "items": command_items}
        assert [item["id"] for item in page["items"]] == ["e1", "e2"], "oldest first"
        access = (await client.get("/ns/team/api/deadletters/access")).json()
        assert (access["events"], access["replayEvents"]) == (True, True)
        no_token = await client.post("/api/eventletters/e2/replay")
        assert no_token.status_code == 403 and by_page.writes == [], "a write without the page's token"
        replayed = await client.post("/ns/team/api/eventletters/e2/replay", headers=WRITE)
        assert replayed.status_code == 202, replayed.text
        assert replayed.json() == {"replayed": ["e2"], "message": said[0]}

    serve(by_page, probe)
    assert by_page.writes == by_command.writes, "the page's replay is the command's"
    assert by_page.writes[0]["metadata"]["annotations"] == {REPLAY_ANNOTATION: "e2"}
    assert set(by_page.writes[0]["data"]) == {"e1", "e2"}, "the operator takes the letters, not the page"


def test_replay_all_asks_for_every_letter_as_replay_all_does() -> None:
    by_command = FakeApi(frozenset({"get", "update"}))
    assert command(by_command, "replay", [], everything=True)[0] == 0
    api = FakeApi(frozenset({"get", "update"}))

    async def probe(client: httpx.AsyncClient) -> None:
        replayed = await client.post("/api/eventletters/replay", headers=WRITE)
        assert replayed.status_code == 202 and replayed.json()["replayed"] == ["e1", "e2"], replayed.text

    serve(api, probe)
    assert api.writes == by_command.writes and api.writes[0]["metadata"]["annotations"] == {REPLAY_ANNOTATION: "all"}


def test_a_letter_that_is_not_kept_is_a_404_naming_it_and_nothing_is_asked() -> None:
    api = FakeApi(frozenset({"get", "update"}))

    async def probe(client: httpx.AsyncClient) -> None:
        missing = await client.post("/api/eventletters/e9/replay", headers=WRITE)
        assert missing.status_code == 404 and "no dead letter 'e9' in namespace towline-system" in \
            missing.json()["message"], missing.text

    serve(api, probe)
    assert api.writes == []


def test_a_person_who_may_not_read_them_gets_the_api_servers_403_saying_what_it_takes_and_nothing_is_written() -> None:
    api = FakeApi(frozenset())

    async def probe(client: httpx.AsyncClient) -> None:
        access = (await client.get("/api/deadletters/access")).json()
        assert (access["events"], access["replayEvents"]) == (False, False), "no events section, no buttons"
        listed = await client.get("/api/eventletters")
        message = listed.json()["message"]
        assert listed.status_code == 403 and "not yours to read (it takes get on it)" in message, listed.text
        assert 'User "carol" cannot get resource "configmaps"' in message, "the API server's words"
        for path in ("/api/eventletters/e1/replay", "/api/eventletters/replay"):
            refused = await client.post(path, headers=WRITE)
            assert refused.status_code == 403 and "towline-event-dead-letters" in refused.json()["message"]

    serve(api, probe)
    assert api.writes == []


def test_a_person_who_may_read_but_not_update_them_sees_them_and_may_not_replay() -> None:
    api = FakeApi(frozenset({"get"}))

    async def probe(client: httpx.AsyncClient) -> None:
        access = (await client.get("/api/deadletters/access")).json()
        assert (access["events"], access["replayEvents"]) == (True, False)
        assert len((await client.get("/api/eventletters")).json()["items"]) == 2
        refused = await client.post("/api/eventletters/e1/replay", headers=WRITE)
        message = refused.json()["message"]
        assert refused.status_code == 403, refused.text
        assert "not yours to replay (it takes get and update on it)" in message, message
        assert 'cannot update resource "configmaps"' in message

    serve(api, probe)
    assert api.writes == []


def test_the_letters_are_read_in_the_operator_namespace_the_view_is_given() -> None:
    api = FakeApi(frozenset({"get", "update"}), operator_namespace="towline")

    async def probe(client: httpx.AsyncClient) -> None:
        listed = (await client.get("/ns/team/api/eventletters")).json()
        assert listed["operatorNamespace"] == "towline" and len(listed["items"]) == 2
        assert (await client.get("/api/deadletters/access")).json()["replayEvents"] is True

    serve(api, probe, operator_namespace="towline")
    assert {review["namespace"] for review in api.reviews if review["name"] == DEAD_LETTERS_CONFIG_MAP} == \
        {"towline"}


def test_kubectl_towline_ui_takes_the_operator_namespace_as_deadletters_does() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["ui"]).operator_namespace == deadletters.DEFAULT_OPERATOR_NAMESPACE
    assert parser.parse_args(["deadletters"]).operator_namespace == deadletters.DEFAULT_OPERATOR_NAMESPACE
    assert parser.parse_args(["ui", "--operator-namespace", "towline"]).operator_namespace == "towline"
