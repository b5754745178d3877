"""Who a web view request acts as: the one way a handler reaches the API server, and the page's CSRF token.

The door of the running mode (the launch code of `kubectl towline ui`, or the OpenID Connect session of the
in-cluster view) admits a request and leaves its Person on it; a handler takes `person(request).api` for every
call, so each call is made with that person's credential (their kubeconfig, or their own ID token) and RBAC and
admission decide. A handler never builds a client of its own, and nothing here reads a request header to learn
who someone is: the identity comes only from the door.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from towline.k8s.client import KubeApi

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CSRF_HEADER = "X-Towline-CSRF"
"""Every write carries the page's token in this header; the page reads it from <meta name="towline-csrf">."""
NAMESPACE_PREFIX = "/ns/{namespace}"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Person:
    """The signed-in person of one request."""

    api: KubeApi = field(repr=False)
    """Acts as this person on the API server; the only client a handler may use."""
    user: str
    """Their username as the API server authenticates them: what `decidedBy` and `requestedBy` carry."""
    csrf: str = field(repr=False)
    """The token this person's writes must carry in CSRF_HEADER."""
    default_namespace: str
    """The namespace of a page whose path names none."""
    alive: Callable[[], bool] | None = field(default=None, repr=False, compare=False)
    """Whether the sign-in this request came with still lasts (None: it lasts as long as the process, as
    `kubectl towline ui`'s does). A live stream ends when it no longer does."""


class Door(Protocol):
    """Admits a request: a Person, None for a path that needs nobody (static files, the sign-in itself), or the
    response that sends the browser to sign in or refuses it."""

    async def admit(self, request: web.Request) -> Person | web.StreamResponse | None: ...


class BadInputError(ValueError):
    """Input a page sent that cannot be asked of the API server or the archive (a name that is no object name, a
    filter out of range, a body the view does not take). Raised anywhere in a handler; the view's middleware
    answers `status` (400 unless said) with the message, which names the field and the fix, before any API call."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


PERSON = web.RequestKey("person", Person)
DOOR = web.AppKey("door", Door)


def person(request: web.Request) -> Person:
    """The request's person; a route behind the door always has one."""
    return request[PERSON]


def api(request: web.Request) -> KubeApi:
    return person(request).api


def user(request: web.Request) -> str:
    return person(request).user


class BadNamespaceError(web.HTTPBadRequest):
    def __init__(self, given: str) -> None:
        super().__init__(text=f"namespace {given[:80]!r} is not a namespace name (lowercase letters, digits and '-', "
                              "at most 63): fix the /ns/<namespace>/ part of the address or the ns= parameter\n")


def namespace(request: web.Request) -> str:
    """The namespace a request is about: the path's /ns/<namespace>/, else `?ns=`, else the person's default."""
    given = request.match_info.get("namespace") or request.query.get("ns") or person(request).default_namespace
    if not _DNS_LABEL.fullmatch(given):
        raise BadNamespaceError(given)
    return given


def page_base(request: web.Request) -> str:
    """What the page's links start with: /ns/<namespace> when the address named it, else nothing."""
    return f"/ns/{namespace(request)}" if "namespace" in request.match_info else ""


def add_get(app: web.Application, path: str, handler: Handler) -> None:
    """Serve GET `path` for the default namespace and under /ns/<namespace>/ (the stable deep links)."""
    app.router.add_get(path, handler)
    app.router.add_get(NAMESPACE_PREFIX + path, handler)


def add_post(app: web.Application, path: str, handler: Handler) -> None:
    app.router.add_post(path, handler)
    app.router.add_post(NAMESPACE_PREFIX + path, handler)
