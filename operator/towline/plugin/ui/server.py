"""The web view's application: pages, JSON, live streams and decisions, as the person the door admitted.

One app for both modes. `build_app` is `kubectl towline ui`'s (the door is the launch code, the person is the
kubeconfig's user; `/login` trades the code for the session cookie); the in-cluster view
(towline.plugin.ui.serving) builds the same app behind the OpenID Connect door. Every handler reaches the API
server through `person.api(request)`; nothing is cached across requests and nothing is decided here that RBAC or
admission decide. Every write must carry the page's CSRF token, in both modes.
"""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable
from importlib import resources
from string import Template
from typing import Any

from aiohttp import web

from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import APPROVALS, WORKFLOW_RUNS, ApiError, KubeApi, Resource
from towline.plugin.approvalrule import decision_patch
from towline.plugin.deadletters import DEFAULT_OPERATOR_NAMESPACE
from towline.plugin.ui import actions, deadletters, editor, guard, history, person, views
from towline.plugin.ui.logs import stream_step_logs
from towline.plugin.ui.sse import ClientGone, follow_collection, open_stream

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

STATIC = resources.files("towline.plugin.ui") / "static"
PAGES = ("runs", "run", "approvals", "workflows", "workflow", "history", "archived", "start", "allruns", "editor",
         "deadletters")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

SETTINGS = web.AppKey("settings", dict)
LAUNCH = web.AppKey("launch", guard.Launch)


@web.middleware
async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    admitted = await request.app[person.DOOR].admit(request)
    if isinstance(admitted, web.StreamResponse):
        admitted.headers.update(SECURITY_HEADERS)
        return admitted
    if admitted is not None:
        request[person.PERSON] = admitted
        if request.method not in {"GET", "HEAD"} and not guard.same_secret(
                request.headers.get(person.CSRF_HEADER), admitted.csrf):
            return web.Response(status=403, headers=SECURITY_HEADERS,
                                text=f"refused: a write must carry the page's {person.CSRF_HEADER} header (its "
                                     "<meta name=\"towline-csrf\">): reload the page and try again\n")
    try:
        response = await handler(request)
    except person.BadInputError as error:
        response = web.json_response({"status": error.status, "problem": "bad-request", "message": str(error)},
                                     status=error.status)
    except ApiError as error:
        response = web.json_response({"status": error.status, "message": error.message},
                                     status=error.status if 400 <= error.status < 600 else 502)
    except ClientGone as gone:  # a live page closed: its stream ends here, as far as it went
        return gone.response
    if not response.prepared:
        response.headers.update(SECURITY_HEADERS)
    return response


class LocalDoor:
    """`kubectl towline ui`'s door: the browser that redeemed the launch code acts as the kubeconfig's user."""

    def __init__(self, api: KubeApi, *, namespace: str, user: str, launch: guard.Launch) -> None:
        self.launch = launch
        self.person = person.Person(api=api, user=user, csrf=launch.csrf, default_namespace=namespace)

    async def admit(self, request: web.Request) -> person.Person | web.StreamResponse | None:
        port = request.app[SETTINGS]["port"]
        signed_in = self.launch.signed_in(request.cookies.get(guard.cookie_name(port)))
        why = guard.refusal(method=request.method, path=request.path, headers=request.headers, signed_in=signed_in,
                            port=port)
        if why is not None:
            return web.Response(status=403, text=f"refused: {why}\n")
        return self.person if signed_in else None


def _page(request: web.Request, page: str, subject: str = "") -> web.Response:
    who = person.person(request)
    text = Template((STATIC / "page.html").read_text()).substitute(
        page=page, subject=html.escape(subject), user=html.escape(who.user),
        namespace=html.escape(person.namespace(request)), base=html.escape(person.page_base(request)),
        csrf=html.escape(who.csrf), signout=request.app[SETTINGS].get("signout", ""),
    )
    return web.Response(text=text, content_type="text/html", headers=SECURITY_HEADERS)


def _see_runs(base: str = "") -> web.Response:
    return web.Response(status=303, headers={**SECURITY_HEADERS, "Location": f"{base}/runs"})


async def login(request: web.Request) -> web.StreamResponse:
    """Redeem the launch code once: set the session cookie and go to the runs, so the code leaves the address bar."""
    name = guard.cookie_name(request.app[SETTINGS]["port"])
    outcome = request.app[LAUNCH].redeem(request.query.get(guard.CODE_PARAMETER), request.cookies.get(name))
    if isinstance(outcome, str):
        return web.Response(status=403, text=f"refused: {outcome}\n", headers=SECURITY_HEADERS)
    response = _see_runs()
    if outcome.session is not None:
        response.set_cookie(name, outcome.session, path="/", httponly=True, samesite="Strict")
    return response


async def index(request: web.Request) -> web.StreamResponse:
    return _see_runs(person.page_base(request))


async def runs_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "runs")


async def run_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "run", request.match_info["name"])


async def approvals_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "approvals")


async def approval_page(request: web.Request) -> web.StreamResponse:
    """One approval (a notification's link): the approvals page showing only it."""
    return _page(request, "approvals", request.match_info["name"])


async def workflows_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "workflows")


async def workflow_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "workflow", request.match_info["name"])


def _namespace(request: web.Request) -> str:
    return person.namespace(request)


async def _follow(
    request: web.Request, resource: Resource, *, snapshot: Callable[[list[JSON]], Any],
    change: Callable[[str, JSON], Any], field_selector: str | None = None,
) -> web.StreamResponse:
    """A live stream of one collection in the person's namespace: `snapshot(items)`, then `change` for each event."""
    response, send = await open_stream(request)
    await follow_collection(person.api(request), resource.path(_namespace(request)), send,
                            snapshot=snapshot, change=change, field_selector=field_selector)
    return response


async def _list_events(
    request: web.Request, resource: Resource, view: Callable[[JSON], JSON], key: str,
) -> web.StreamResponse:
    """A list page's stream: every object's `view`, newest first, then each change as {type, <key>: view}."""
    return await _follow(
        request, resource,
        snapshot=lambda items: [view(obj) for obj in views.newest_first(items)],
        change=lambda kind, obj: {"type": kind, key: view(obj)},
    )


async def runs_events(request: web.Request) -> web.StreamResponse:
    return await _list_events(request, WORKFLOW_RUNS, views.run_summary, "run")


async def run_events(request: web.Request) -> web.StreamResponse:
    return await _follow(
        request, WORKFLOW_RUNS, field_selector=f"metadata.name={request.match_info['name']}",
        snapshot=lambda items: actions.run_page_view(items[0]) if items else None,
        change=actions.run_stream_change,
    )


async def approvals_events(request: web.Request) -> web.StreamResponse:
    return await _list_events(request, APPROVALS, views.approval_view, "approval")


async def step_logs_events(request: web.Request) -> web.StreamResponse:
    response, send = await open_stream(request)
    await stream_step_logs(person.api(request), _namespace(request), request.match_info["name"],
                           request.match_info["step"], send)
    return response


async def workflows_json(request: web.Request) -> web.StreamResponse:
    workflows = await session.list_workflows(person.api(request), _namespace(request))
    return web.json_response([views.workflow_summary(w) for w in sorted(
        workflows, key=lambda w: w["metadata"]["name"])])


async def workflow_json(request: web.Request) -> web.StreamResponse:
    api, namespace, name = person.api(request), _namespace(request), request.match_info["name"]
    workflow = await session.get_workflow(api, namespace, name)
    if workflow is None:
        return web.json_response({"status": 404, "message": f"no Workflow {name!r}"}, status=404)
    return web.json_response(views.workflow_detail(workflow, await session.list_runs(api, namespace, name),
                                                   webhook_url=request.app[SETTINGS].get("webhookUrl")))


async def decide(request: web.Request) -> web.StreamResponse:
    """Approve or reject as the person: the same merge patch `kubectl towline approve` sends."""
    try:
        body = json.loads(await request.text())
    except ValueError:
        body = None
    decision = body.get("decision") if isinstance(body, dict) else None
    if decision not in {"Approved", "Rejected"}:
        return web.json_response({"status": 400, "message": "decision must be Approved or Rejected"}, status=400)
    api, name = person.api(request), request.match_info["name"]
    reason = body.get("reason") if isinstance(body, dict) else None
    text = reason.strip()[:1024] if isinstance(reason, str) else None
    spec = decision_patch(person.user(request), decision, text or None)
    decided = await session.decide_approval(api, _namespace(request), name, spec)
    return web.json_response(views.approval_view(decided))


def build_app(api: KubeApi, *, namespace: str, user: str, launch: guard.Launch, allow_apply: bool = False,
              operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE) -> web.Application:
    """`kubectl towline ui`'s application; `settings["port"]` is filled in once the socket is bound."""
    app = build_app_behind(LocalDoor(api, namespace=namespace, user=user, launch=launch), allow_apply=allow_apply,
                           operator_namespace=operator_namespace)
    app[LAUNCH] = launch
    app.router.add_get(guard.LOGIN_PATH, login)
    return app


def build_app_behind(door: person.Door, *, signout: str = "", allow_apply: bool = False,
                     operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE) -> web.Application:
    """The web view's pages and data behind `door`; `signout` is the sign-out path, if the mode has one;
    `allow_apply`: the editor may apply Workflows (as the person), `ui.editor.allowApply`; `operator_namespace`:
    where the events sink keeps its dead letters (`--operator-namespace`)."""
    app = web.Application(middlewares=[guarded], client_max_size=64 * 1024)
    app[person.DOOR] = door
    app[SETTINGS] = {"port": 0, "signout": signout}
    person.add_get(app, "/", index)
    person.add_get(app, "/runs", runs_page)
    person.add_get(app, "/runs/{name}", run_page)
    person.add_get(app, "/approvals", approvals_page)
    person.add_get(app, "/approvals/{name}", approval_page)
    person.add_get(app, "/workflows", workflows_page)
    person.add_get(app, "/workflows/{name}", workflow_page)
    person.add_get(app, "/events/runs", runs_events)
    person.add_get(app, "/events/runs/{name}", run_events)
    person.add_get(app, "/events/runs/{name}/logs/{step}", step_logs_events)
    person.add_get(app, "/events/approvals", approvals_events)
    person.add_get(app, "/api/workflows", workflows_json)
    person.add_get(app, "/api/workflows/{name}", workflow_json)
    person.add_post(app, "/api/approvals/{name}", decide)
    history.add_routes(app, page=_page)
    actions.add_routes(app, page=_page)
    deadletters.add_routes(app, page=_page, operator_namespace=operator_namespace)
    editor.add_routes(app, page=_page, allow_apply=allow_apply)
    app.router.add_static("/static/", str(STATIC), append_version=False)
    return app
