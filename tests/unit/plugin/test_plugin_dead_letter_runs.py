"""Dead letters of kind `run` (towline.plugin.runletters) and their replay, shared by `kubectl towline deadletters`
and the web view's Dead letters page: which runs are letters, what a replay creates for each trigger type, and that
the page's Replay button sends the API server exactly the run the command does, as the person, refusals included."""

from __future__ import annotations

import argparse
import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx
from aiohttp import web

from towline.jsontypes import JSON
from towline.k8s.client import ApiError, KubeApi
from towline.k8s.deliveryletters import REPLAY_OF_ANNOTATION, REPLAYED_BY_ANNOTATION
from towline.k8s.runletters import failed_before_first_step
from towline.plugin import deadletters
from towline.plugin.commands import Io, NotFound
from towline.plugin.runletters import read_run_letters, replay_manifest, run_letter
from towline.plugin.ui import person
from towline.plugin.ui.server import build_app_behind

RUNS = "/apis/towline.dev/v1alpha1/namespaces/team/workflowruns"
WORKFLOW = {"metadata": {"name": "orders", "namespace": "team", "uid": "wf-uid"},
            "spec": {"triggers": [{"name": "paid", "webhook": {}}]}}


def failed_run(name: str = "early", trigger: JSON | None = None, steps: list[JSON] | None = None,
               phase: str = "Failed") -> JSON:
    return {
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}",
                     "creationTimestamp": "2026-12-07T06:00:00Z"},
        "spec": {"workflowRef": {"name": "orders"}, "params": {"region": "emea"}, "requestedBy": "alice",
                 **({"trigger": trigger} if trigger else {})},
        "status": {"phase": phase, "message": "the run cannot start: Workflow 'orders' does not exist",
                   "finishedAt": "2026-12-07T06:00:01Z", **({"steps": steps} if steps is not None else {})},
    }


def test_a_failed_run_without_a_started_step_is_a_letter_and_no_other_run_is() -> None:
    assert failed_before_first_step(failed_run())
    assert failed_before_first_step(failed_run(steps=[{"id": "a", "phase": "Pending"}]))
    assert not failed_before_first_step(failed_run(steps=[{"id": "a", "phase": "Failed", "attempt": 1}]))
    assert not failed_before_first_step(failed_run(steps=[{"id": "gate", "approvalName": "early-gate"}]))
    assert not failed_before_first_step(failed_run(phase="Succeeded"))
    assert not failed_before_first_step(failed_run(phase="Cancelled"))
    child = failed_run(trigger={"type": "parent", "parent": {"run": "p", "uid": "u", "step": "s"}})
    assert not failed_before_first_step(child), "a subflow's child is retried through its parent"


def test_a_replay_keeps_the_params_and_trigger_and_names_its_replayer() -> None:
    manual = run_letter(failed_run())
    assert manual is not None
    body = replay_manifest(manual, "root", "orders-replay-1", "wf-uid")
    assert body["spec"] == {"workflowRef": {"name": "orders"}, "params": {"region": "emea"}, "requestedBy": "root"}
    assert body["metadata"]["annotations"] == {REPLAYED_BY_ANNOTATION: "root",
                                               REPLAY_OF_ANNOTATION: "workflowruns/early"}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "wf-uid"

    hook = run_letter(failed_run(trigger={"type": "webhook", "name": "paid", "deliveryId": "msg_1",
                                          "data": {"order": "A-7"}}))
    assert hook is not None
    spec = replay_manifest(hook, "root", "n", "wf-uid")["spec"]
    assert spec["trigger"] == {"type": "webhook", "name": "paid", "data": {"order": "A-7"}}, "no delivery id: a replay"

    slot = run_letter(failed_run(trigger={"type": "schedule", "name": "nightly",
                                          "scheduledTime": "2026-12-07T02:00:00Z"}))
    assert slot is not None
    assert "trigger" not in replay_manifest(slot, "root", "n", "wf-uid")["spec"], "a slot is the operator's to fire"


class FakeApi:
    """The API server as one person sees it: the namespace's runs, the Workflow, no delivery letters, no archive;
    records each create and answers it, or refuses it as admission would."""

    def __init__(self, user: str, refusal: ApiError | None = None) -> None:
        self.user, self.refusal = user, refusal
        self.runs: dict[str, JSON] = {"early": failed_run()}
        self.created: list[JSON] = []

    async def get(self, path: str) -> JSON | None:
        if path.endswith("/workflows/orders"):
            return WORKFLOW
        if path.startswith(RUNS + "/"):
            return copy.deepcopy(self.runs.get(path.removeprefix(RUNS + "/")))
        return None

    async def list(self, path: str, **_: Any) -> list[JSON]:
        assert path == RUNS, path
        return [copy.deepcopy(run) for run in self.runs.values()]

    async def request(self, method: str, path: str, *, body: JSON | None = None, **_: Any) -> JSON:
        if path.endswith("selfsubjectreviews"):
            return {"status": {"userInfo": {"username": self.user}}}
        if path.endswith("selfsubjectaccessreviews"):
            return {"status": {"allowed": self.refusal is None}}
        if "archive.towline.dev" in path:
            raise ApiError(404, "the server could not find the requested resource")
        raise AssertionError(f"unexpected {method} {path}")

    async def create(self, path: str, body: JSON) -> tuple[JSON, bool]:
        assert path == RUNS
        self.created.append(copy.deepcopy(body))
        if self.refusal is not None:
            raise self.refusal
        name = body["metadata"]["name"]
        if name in self.runs:
            return self.runs[name], False
        self.runs[name] = copy.deepcopy(body)
        return body, True


class OnePerson:
    def __init__(self, api: FakeApi) -> None:
        self.api = api

    async def admit(self, request: web.Request) -> person.Person:
        return person.Person(api=cast(KubeApi, self.api), user=self.api.user, csrf="token", default_namespace="team")


Probe = Callable[[httpx.AsyncClient], Awaitable[None]]


def serve(api: FakeApi, probe: Probe) -> None:
    async def main() -> None:
        runner = web.AppRunner(build_app_behind(OnePerson(api)))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                await probe(client)
        finally:
            await runner.cleanup()
    asyncio.run(main())


def command_replay(api: FakeApi, letter: str) -> tuple[int, list[str], list[str]]:
    out: list[str] = []
    err: list[str] = []
    args = argparse.Namespace(verb="replay", ids=[letter], all=False, all_namespaces=False, output=None,
                              operator_namespace="towline-system")
    code = asyncio.run(deadletters.run(cast(KubeApi, api), Io(out=out.append, err=err.append), args, "team"))
    return code, out, err


def test_the_page_lists_run_letters_and_its_replay_creates_what_the_command_does() -> None:
    by_command = FakeApi("root")
    code, out, _ = command_replay(by_command, "early")
    assert code == 0 and "replayed by root as run" in out[0]

    by_page = FakeApi("root")

    async def probe(client: httpx.AsyncClient) -> None:
        listed = (await client.get("/ns/team/api/deadletters")).json()
        assert [(item["kind"], item["id"]) for item in listed["items"]] == [("run", "early")]
        assert (await client.get("/ns/team/api/deadletters/access")).json()["list"] is True
        no_token = await client.post("/ns/team/api/deadletters/early/replay")
        assert no_token.status_code == 403 and by_page.created == [], "a write without the page's token"
        replayed = await client.post("/ns/team/api/deadletters/early/replay", headers={person.CSRF_HEADER: "token"})
        assert replayed.status_code == 201, replayed.text
        assert replayed.json()["message"] == out[0]
        again = await client.post("/ns/team/api/deadletters/early/replay", headers={person.CSRF_HEADER: "token"})
        assert again.status_code == 409 and "replayed already by root" in again.json()["message"], again.text
        page = await client.get("/ns/team/deadletters")
        assert 'data-page="deadletters"' in page.text and "/static/deadletters.js" in page.text

    serve(by_page, probe)
    assert by_page.created[0] == by_command.created[0], "the page's replay is the command's"


def test_the_api_servers_refusal_of_a_replay_reaches_the_page_and_the_command_in_its_words() -> None:
    words = "alice may not replay dead letters in team: that takes the replay verb on workflowruns"
    code, _, err = command_replay(FakeApi("alice", ApiError(403, words)), "early")
    assert code == 1 and words in err[0]

    api = FakeApi("alice", ApiError(403, words))

    async def probe(client: httpx.AsyncClient) -> None:
        refused = await client.post("/ns/team/api/deadletters/early/replay", headers={person.CSRF_HEADER: "token"})
        assert refused.status_code == 403 and refused.json()["message"] == words
        assert (await client.get("/ns/team/api/deadletters/access")).json()["list"] is False
        missing = await client.post("/ns/team/api/deadletters/nope/replay", headers={person.CSRF_HEADER: "token"})
        assert missing.status_code == 404 and "no dead letter 'nope' in namespace team" in missing.json()["message"]

    serve(api, probe)
    assert [body["metadata"]["annotations"][REPLAYED_BY_ANNOTATION] for body in api.created] == ["alice"]


def test_a_started_run_is_no_letter_to_replay() -> None:
    api = FakeApi("root")
    api.runs["late"] = failed_run("late", steps=[{"id": "a", "attempt": 1, "phase": "Failed"}])
    code, _, err = command_replay(api, "late")
    assert code == 1 and "did not fail before its first step (phase Failed)" in err[0] and api.created == []


def test_the_list_shows_a_run_row_beside_the_others() -> None:
    letter = run_letter(failed_run())
    assert letter is not None
    [header, row] = deadletters.table([], [], [letter]).splitlines()
    assert header.split()[:3] == ["KIND", "ID", "NAMESPACE"]
    assert row.split()[:4] == ["run", "early", "team", "orders/manual"] and "does not exist" in row


class ArchivingApi(FakeApi):
    """An archive that kept `early` (also live) and `pruned` (gone from the cluster), both as the runs they were."""

    async def request(self, method: str, path: str, *, body: JSON | None = None, **kwargs: Any) -> JSON:
        if "archive.towline.dev" in path:
            assert kwargs.get("query") == {"phase": "Failed", "limit": "200"}, kwargs
            return {"items": [{"record": {"run": failed_run("early")}}, {"record": {"run": failed_run("pruned")}},
                              {"record": {"run": failed_run("ok", phase="Succeeded")}}]}
        return await super().request(method, path, body=body, **kwargs)


def test_the_archive_adds_the_failed_runs_the_cluster_pruned_once_each() -> None:
    letters = asyncio.run(read_run_letters(cast(KubeApi, ArchivingApi("root")), "team"))
    assert [(letter.name, letter.archived) for letter in letters] == [("early", False), ("pruned", True)]


class NoRunsApi(FakeApi):
    """A person who may not read the namespace's runs (an admin of the events sink's letters only)."""

    async def get(self, path: str) -> JSON | None:
        if path.startswith(RUNS):
            raise ApiError(403, 'workflowruns.towline.dev "x" is forbidden')
        return await super().get(path)


def test_an_id_that_is_no_readable_run_goes_on_to_the_other_kinds() -> None:
    try:
        command_replay(NoRunsApi("ops"), "5c0e8f6d2b7a41e39d4f0a1b2c3d4e5f")
    except NotFound as missing:
        assert "no dead letter '5c0e8f6d2b7a41e39d4f0a1b2c3d4e5f'" in str(missing)
        assert "nor a refused delivery or a failed run in namespace team" in str(missing)
    else:
        raise AssertionError("an id found nowhere is a NotFound naming it")
