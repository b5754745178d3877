"""The default-deny policy is read before a step Job unless the watch last showed it intact."""

from __future__ import annotations

import asyncio
from typing import Any

from towline.k8s.actions import ActionContext, DefaultDenyPolicies, ensure_default_deny
from towline.k8s.objects import StepPodSettings, build_default_deny_policy
from towline.validation.catalog import connector_catalog

NS = "team"


def policy(version: str, *, opened: bool = False) -> dict[str, Any]:
    body = build_default_deny_policy(NS)
    body["metadata"]["resourceVersion"] = version
    if opened:
        body["spec"]["egress"] = [{}]
    return body


class RecordingApi:
    """Answers like the API server for the one policy, and records every call."""

    def __init__(self, existing: dict[str, Any] | None) -> None:
        self.existing = existing
        self.calls: list[str] = []

    async def get(self, path: str) -> dict[str, Any] | None:
        self.calls.append("GET")
        return self.existing

    async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        self.calls.append("POST")
        self.existing = {**body, "metadata": {**body["metadata"], "resourceVersion": "50"}}
        return self.existing, True

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("PUT")
        self.existing = {**body, "metadata": {**body["metadata"], "resourceVersion": "51"}}
        return self.existing


def ensure(api: RecordingApi, known: DefaultDenyPolicies | None) -> list[str]:
    context = ActionContext(api=api, pod_settings=StepPodSettings(),  # type: ignore[arg-type]
                            catalog=connector_catalog(), default_deny=known)
    asyncio.run(ensure_default_deny(context, NS))
    return api.calls


def test_a_policy_the_watch_showed_intact_costs_no_request() -> None:
    known = DefaultDenyPolicies()
    known.saw(policy("10"))
    assert ensure(RecordingApi(policy("10")), known) == []


def test_after_one_read_the_next_step_needs_none() -> None:
    known, api = DefaultDenyPolicies(), RecordingApi(policy("10"))
    assert ensure(api, known) == ["GET"]
    assert ensure(api, known) == ["GET"], "no second read"


def test_a_deleted_policy_seen_on_the_watch_is_created_again() -> None:
    known = DefaultDenyPolicies()
    known.saw(policy("10"))
    known.saw(policy("11"), deleted=True)
    api = RecordingApi(None)
    assert ensure(api, known) == ["GET", "POST"]
    assert known.intact(NS)


def test_an_opened_policy_seen_on_the_watch_is_put_back() -> None:
    known = DefaultDenyPolicies()
    known.saw(policy("10"))
    known.saw(policy("11", opened=True))
    api = RecordingApi(policy("11", opened=True))
    assert ensure(api, known) == ["GET", "PUT"]
    assert api.existing is not None and "egress" not in api.existing["spec"]


def test_an_answer_older_than_the_watch_cannot_mark_a_deleted_policy_intact() -> None:
    known = DefaultDenyPolicies()
    mark = known.asking(NS)
    known.saw(policy("11"), deleted=True)
    known.answered(policy("10"), mark)  # a read that was answered before the delete, handled after it
    assert not known.intact(NS)


def test_a_delete_the_watch_shows_while_the_read_is_under_way_wins() -> None:
    """resourceVersions are opaque: the order of events, not the size of a version, decides."""
    known = DefaultDenyPolicies()

    class DeletedDuringTheRead(RecordingApi):
        async def get(self, path: str) -> dict[str, Any] | None:
            answer = await super().get(path)
            known.saw(policy("9"), deleted=True)  # the watch's event arrives before the answer is handled
            return answer

    ensure(DeletedDuringTheRead(policy("10")), known)
    assert not known.intact(NS), "the next step Job reads the policy again"


def test_without_a_watch_every_step_reads_the_policy() -> None:
    api = RecordingApi(policy("10"))
    assert ensure(api, None) == ["GET"]
    assert ensure(api, None) == ["GET", "GET"]
