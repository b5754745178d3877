"""The web view's Dead letters page: a namespace's refused deliveries and runs that failed before their first step,
and the events sink's letters of the whole installation, read and replayed as the signed-in person.

The list is `kubectl towline deadletters`'s for one namespace and the Replay button is its `replay ID`: both call
towline.plugin.replaying with the person's own API client, so RBAC decides who may read the letters and the
admission policy who may replay, exactly as for kubectl; a refusal reaches the page in the API server's words. The
nav shows the page to a person the API server says may read the namespace's letters (a SelfSubjectAccessReview),
which only hides a link: the list itself is what RBAC answers. Never reads a Secret.

The events sink's letters are the ConfigMap towline-event-dead-letters in the operator's namespace (the view's
`--operator-namespace`, `kubectl towline deadletters`'s default, or the chart's release namespace): read, and their
replay asked of the operator, with towline.plugin.deadletters' code, as the person. The page shows their section to a
person the API server says may get that ConfigMap, and their Replay buttons to one who may update it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from towline.k8s import session
from towline.k8s.client import CONFIG_MAPS, ApiError
from towline.k8s.deadletters import DEAD_LETTERS_CONFIG_MAP, read_dead_letters
from towline.k8s.deliveryletters import DELIVERY_LETTERS_CONFIG_MAP
from towline.plugin.commands import NotFound
from towline.plugin.deadletters import letter_document, replay_events
from towline.plugin.replaying import ReplayRefused, namespace_letters, replay_letter
from towline.plugin.ui import person
from towline.plugin.ui.actions import problem

PageRenderer = Callable[[web.Request, str, str], web.Response]
FORBIDDEN = 403

OPERATOR_NAMESPACE = web.AppKey("operator_namespace", str)
"""Where the events sink keeps its letters: the namespace Towline's operator runs in."""


async def letters_json(request: web.Request) -> web.StreamResponse:
    """The namespace's letters of kind delivery and run, as `kubectl towline deadletters -o json` has them."""
    deliveries, runs = await namespace_letters(person.api(request), person.namespace(request))
    return web.json_response({"namespace": person.namespace(request),
                              "items": [*(d.document() for d in deliveries), *(r.document() for r in runs)]})


async def access_json(request: web.Request) -> web.StreamResponse:
    """What the page shows, each the API server's word: the namespace's letters (`list`, which also puts the page in
    the nav), the events sink's letters (`events`) and their Replay buttons (`replayEvents`)."""
    api, where = person.api(request), request.app[OPERATOR_NAMESPACE]
    listed, events, replay_events_allowed = await asyncio.gather(
        session.may_i(api, "get", CONFIG_MAPS, person.namespace(request), DELIVERY_LETTERS_CONFIG_MAP),
        session.may_i(api, "get", CONFIG_MAPS, where, DEAD_LETTERS_CONFIG_MAP),
        session.may_i(api, "update", CONFIG_MAPS, where, DEAD_LETTERS_CONFIG_MAP))
    return web.json_response({"list": listed, "events": events, "replayEvents": replay_events_allowed})


def _events_refused(where: str, what: str, error: ApiError) -> web.Response:
    """The API server's refusal of the events sink's letters, saying what it takes."""
    return problem(FORBIDDEN, f"the events sink's dead letters (ConfigMap {DEAD_LETTERS_CONFIG_MAP} in namespace "
                              f"{where}) are not yours to {what}: {error.message}")


async def event_letters_json(request: web.Request) -> web.StreamResponse:
    """The events sink's letters, as `kubectl towline deadletters -o json` has them, read as the person."""
    where = request.app[OPERATOR_NAMESPACE]
    try:
        letters = await read_dead_letters(person.api(request), where)
    except ApiError as error:
        if error.status != FORBIDDEN:
            raise
        return _events_refused(where, "read (it takes get on it)", error)
    return web.json_response({"operatorNamespace": where, "items": [letter_document(letter) for letter in letters]})


async def _replay_events(request: web.Request, ids: list[str] | None) -> web.StreamResponse:
    where = request.app[OPERATOR_NAMESPACE]
    try:
        asked = await replay_events(person.api(request), where, ids)
    except LookupError as missing:
        return problem(404, str(missing))
    except ApiError as error:
        if error.status != FORBIDDEN:
            raise
        return _events_refused(where, "replay (it takes get and update on it)", error)
    return web.json_response({"replayed": [letter.id for letter in asked.letters], "message": asked.message},
                             status=202 if asked.letters else 200)


async def replay_event(request: web.Request) -> web.StreamResponse:
    """`kubectl towline deadletters replay ID` of an events sink's letter, as the person: the operator sends it."""
    return await _replay_events(request, [request.match_info["id"]])


async def replay_all_events(request: web.Request) -> web.StreamResponse:
    """`kubectl towline deadletters replay --all`'s events, as the person."""
    return await _replay_events(request, None)


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


def add_routes(app: web.Application, *, page: PageRenderer, operator_namespace: str) -> None:
    app[OPERATOR_NAMESPACE] = operator_namespace

    async def letters_page(request: web.Request) -> web.StreamResponse:
        return page(request, "deadletters", "")

    person.add_get(app, "/deadletters", letters_page)
    person.add_get(app, "/api/deadletters", letters_json)
    person.add_get(app, "/api/deadletters/access", access_json)
    person.add_post(app, "/api/deadletters/{id}/replay", replay)
    # Not under /api/deadletters/: a delivery or run letter's id may be any object name, "events" too.
    person.add_get(app, "/api/eventletters", event_letters_json)
    person.add_post(app, "/api/eventletters/replay", replay_all_events)
    person.add_post(app, "/api/eventletters/{id}/replay", replay_event)
