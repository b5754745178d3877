"""The web view's Dead letters page: a namespace's refused deliveries and runs that failed before their first step,
read and replayed as the signed-in person.

The list is `kubectl towline deadletters`'s for one namespace and the Replay button is its `replay ID`: both call
towline.plugin.replaying with the person's own API client, so RBAC decides who may read the letters and the
admission policy who may replay, exactly as for kubectl; a refusal reaches the page in the API server's words. The
nav shows the page to a person the API server says may read the namespace's letters (a SelfSubjectAccessReview),
which only hides a link: the list itself is what RBAC answers. Never reads a Secret.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from towline.k8s import session
from towline.k8s.client import CONFIG_MAPS
from towline.k8s.deliveryletters import DELIVERY_LETTERS_CONFIG_MAP
from towline.plugin.commands import NotFound
from towline.plugin.replaying import ReplayRefused, namespace_letters, replay_letter
from towline.plugin.ui import person
from towline.plugin.ui.actions import problem

JSON = dict[str, Any]
PageRenderer = Callable[[web.Request, str, str], web.Response]


async def letters_json(request: web.Request) -> web.StreamResponse:
    """The namespace's letters of kind delivery and run, as `kubectl towline deadletters -o json` has them."""
    deliveries, runs = await namespace_letters(person.api(request), person.namespace(request))
    return web.json_response({"namespace": person.namespace(request),
                              "items": [*(d.document() for d in deliveries), *(r.document() for r in runs)]})


async def access_json(request: web.Request) -> web.StreamResponse:
    """Whether to show the page in the nav: may the person read the namespace's letters (the API server's word)."""
    allowed = await session.may_i(person.api(request), "get", CONFIG_MAPS, person.namespace(request),
                                  DELIVERY_LETTERS_CONFIG_MAP)
    return web.json_response({"list": allowed})


async def replay(request: web.Request) -> web.StreamResponse:
    """`kubectl towline deadletters replay ID`, as the person: one new run, or the reason there is none."""
    letter, namespace = request.match_info["id"], person.namespace(request)
    try:
        replayed = await replay_letter(person.api(request), namespace, letter)
    except ReplayRefused as refused:
        return problem(409, str(refused))
    except NotFound as missing:
        return problem(404, str(missing))
    if replayed is None:
        return problem(404, f"no dead letter {letter!r} in namespace {namespace}: neither a refused delivery nor a "
                            "run that failed before its first step (the list shows their ids)")
    return web.json_response({"run": replayed.run, "message": replayed.message}, status=201)


def add_routes(app: web.Application, *, page: PageRenderer) -> None:
    async def letters_page(request: web.Request) -> web.StreamResponse:
        return page(request, "deadletters", "")

    person.add_get(app, "/deadletters", letters_page)
    person.add_get(app, "/api/deadletters", letters_json)
    person.add_get(app, "/api/deadletters/access", access_json)
    person.add_post(app, "/api/deadletters/{id}/replay", replay)
