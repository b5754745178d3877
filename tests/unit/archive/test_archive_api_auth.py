"""Whom the archive API believes and how it asks the API server: the front proxy's published settings, the user
headers, the SubjectAccessReview it sends and the few seconds it keeps each answer."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from towline.archive.apiauth import Authorizer, FrontProxyConfig, NotConfigured, Question, UserInfo, front_proxy_user

PEER = {"subject": ((("organizationName", "x"),), (("commonName", "front-proxy-client"),))}
CONFIG = FrontProxyConfig(client_ca_pem="-----BEGIN CERTIFICATE-----", allowed_names=("front-proxy-client",))
LIST_RUNS = Question("list", "towline.dev", "workflowruns", "team-a")


def headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


def test_the_published_configmap_names_the_ca_the_allowed_names_and_the_headers() -> None:
    config = FrontProxyConfig.from_configmap({
        "requestheader-client-ca-file": "-----BEGIN CERTIFICATE-----\n...",
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    })
    assert config.allowed_names == ("front-proxy-client",) and config.group_headers == ("X-Remote-Group",)


def test_an_api_server_without_a_request_header_ca_is_named_with_the_flag_to_set() -> None:
    with pytest.raises(NotConfigured, match="--requestheader-client-ca-file"):
        FrontProxyConfig.from_configmap({"client-ca-file": "-----BEGIN CERTIFICATE-----"})


def test_the_user_its_groups_and_extra_come_from_the_front_proxys_headers() -> None:
    user = front_proxy_user(CONFIG, PEER, headers(
        ("X-Remote-User", "oidc:alice@example.com"), ("X-Remote-Group", "team-a"), ("X-Remote-Group", "devs"),
        ("X-Remote-Extra-Scopes", "openid"), ("X-Remote-Extra-Acme.com%2Fproject", "p1")))
    assert user == UserInfo(name="oidc:alice@example.com", groups=("team-a", "devs"),
                            extra=(("acme.com/project", ("p1",)), ("scopes", ("openid",))))


def test_no_certificate_or_no_user_header_is_nobody() -> None:
    assert front_proxy_user(CONFIG, None, headers(("X-Remote-User", "admin"))) is None
    assert front_proxy_user(CONFIG, {}, headers(("X-Remote-User", "admin"))) is None
    assert front_proxy_user(CONFIG, PEER, headers(("X-Remote-Group", "system:masters"))) is None


@dataclass
class ApiServer:
    """Answers SubjectAccessReviews from a set of allowed users, counting what it was asked."""

    allowed_users: set[str]
    reviews: list[dict[str, Any]] = field(default_factory=list)

    async def request(self, method: str, path: str, *, body: Any = None) -> dict[str, Any]:
        assert (method, path) == ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")
        self.reviews.append(json.loads(json.dumps(body)))
        return {"status": {"allowed": body["spec"]["user"] in self.allowed_users}}


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_review_asks_about_the_person_with_their_groups_and_extra() -> None:
    server = ApiServer({"alice"})
    alice = UserInfo("alice", ("team-a",), (("scopes", ("openid",)),))
    assert asyncio.run(Authorizer(server).allowed(alice, Question("get", "", "pods", "team-a", "log")))
    assert server.reviews == [{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": "alice", "groups": ["team-a"], "extra": {"scopes": ["openid"]},
        "resourceAttributes": {"verb": "get", "group": "", "resource": "pods", "namespace": "team-a",
                               "subresource": "log"}}}]


def test_an_answer_is_kept_for_a_few_seconds_per_person_and_question_and_no_more_than_the_bound() -> None:
    server, clock = ApiServer({"alice"}), Clock()
    authorizer = Authorizer(server, clock=clock, ttl=5.0, bound=2)
    alice, alice_in_a_group, bob = UserInfo("alice"), UserInfo("alice", ("admins",)), UserInfo("bob")

    async def ask(user: UserInfo, question: Question = LIST_RUNS) -> bool:
        return await authorizer.allowed(user, question)

    assert asyncio.run(ask(alice)) and asyncio.run(ask(alice))
    assert len(server.reviews) == 1
    assert asyncio.run(ask(alice_in_a_group)) and len(server.reviews) == 2, "other groups: another question"
    server.allowed_users.clear()
    clock.now += 5.0
    assert not asyncio.run(ask(alice)), "a revoked right holds here at most the cache's seconds"
    assert not asyncio.run(ask(bob)) and len(server.reviews) == 4
    assert len(authorizer._answers) == 2
