"""The local web server of `kubectl towline ui`: pages, JSON, live streams and decisions, as one person.

Every handler reaches the API server through towline.k8s with the person's
kubeconfig client; nothing is cached across requests and nothing is decided
here that RBAC or admission decide. The guard (towline.plugin.ui.guard) runs
before any handler; `/login` trades the launch's one-time code for the session cookie.
"""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable
from importlib import resources
from string import Template
from typing import Any

from aiohttp import web

from towline.k8s import session
from towline.k8s.client import APPROVALS, WORKFLOW_RUNS, ApiError, KubeApi, Resource
from towline.plugin.approvalrule import decision_patch
from towline.plugin.runtree import run_tree
from towline.plugin.ui import guard, history, views
from towline.plugin.ui.logs import stream_step_logs
from towline.plugin.ui.sse import follow_collection, open_stream

JSON = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

STATIC = resources.files("towline.plugin.ui") / "static"
PAGES = ("runs", "run", "approvals", "workflows", "workflow", "history", "archived")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

API = web.AppKey("api", KubeApi)
SETTINGS = web.AppKey("settings", dict)
LAUNCH = web.AppKey("launch", guard.Launch)


@web.middleware
async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    port = request.app[SETTINGS]["port"]
    signed_in = request.app[LAUNCH].signed_in(request.cookies.get(guard.cookie_name(port)))
    why = guard.refusal(method=request.method, path=request.path, headers=request.headers, signed_in=signed_in,
                        port=port)
    if why is not None:
        return web.Response(status=403, text=f"refused: {why}\n", headers=SECURITY_HEADERS)
    try:
        response = await handler(request)
    except ApiError as error:
        response = web.json_response({"status": error.status, "message": error.message},
                                     status=error.status if 400 <= error.status < 600 else 502)
    if not response.prepared:
        response.headers.update(SECURITY_HEADERS)
    return response


def _page(request: web.Request, page: str, subject: str = "") -> web.Response:
    settings = request.app[SETTINGS]
    text = Template((STATIC / "page.html").read_text()).substitute(
        page=page, subject=html.escape(subject), user=html.escape(settings["user"]),
        namespace=html.escape(settings["namespace"]),
    )
    return web.Response(text=text, content_type="text/html", headers=SECURITY_HEADERS)


def _see_runs() -> web.Response:
    return web.Response(status=303, headers={**SECURITY_HEADERS, "Location": "/runs"})


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
    return _see_runs()


async def runs_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "runs")


async def run_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "run", request.match_info["name"])


async def approvals_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "approvals")


async def workflows_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "workflows")


async def workflow_page(request: web.Request) -> web.StreamResponse:
    return _page(request, "workflow", request.match_info["name"])


def _namespace(request: web.Request) -> str:
    return str(request.app[SETTINGS]["namespace"])


async def _follow(
    request: web.Request, resource: Resource, *, snapshot: Callable[[list[JSON]], Any],
    change: Callable[[str, JSON], Any], field_selector: str | None = None,
) -> web.StreamResponse:
    """A live stream of one collection in the person's namespace: `snapshot(items)`, then `change` for each event."""
    response, send = await open_stream(request)
    await follow_collection(request.app[API], resource.path(_namespace(request)), send,
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
        snapshot=lambda items: views.run_detail(run_tree(items[0])) if items else None,
        change=lambda kind, run: None if kind == "DELETED" else views.run_detail(run_tree(run)),
    )


async def approvals_events(request: web.Request) -> web.StreamResponse:
    return await _list_events(request, APPROVALS, views.approval_view, "approval")


async def step_logs_events(request: web.Request) -> web.StreamResponse:
    response, send = await open_stream(request)
    await stream_step_logs(request.app[API], _namespace(request), request.match_info["name"],
                           request.match_info["step"], send)
    return response


async def workflows_json(request: web.Request) -> web.StreamResponse:
    workflows = await session.list_workflows(request.app[API], _namespace(request))
    return web.json_response([views.workflow_summary(w) for w in sorted(
        workflows, key=lambda w: w["metadata"]["name"])])


async def workflow_json(request: web.Request) -> web.StreamResponse:
    api, namespace, name = request.app[API], _namespace(request), request.match_info["name"]
    workflow = await session.get_workflow(api, namespace, name)
    if workflow is None:
        return web.json_response({"status": 404, "message": f"no Workflow {name!r}"}, status=404)
    return web.json_response(views.workflow_detail(workflow, await session.list_runs(api, namespace, name)))


async def decide(request: web.Request) -> web.StreamResponse:
    """Approve or reject as the person: the same merge patch `kubectl towline approve` sends."""
    try:
        body = json.loads(await request.text())
    except ValueError:
        body = None
    decision = body.get("decision") if isinstance(body, dict) else None
    if decision not in {"Approved", "Rejected"}:
        return web.json_response({"status": 400, "message": "decision must be Approved or Rejected"}, status=400)
    api, name = request.app[API], request.match_info["name"]
    reason = body.get("reason") if isinstance(body, dict) else None
    text = reason.strip()[:1024] if isinstance(reason, str) else None
    spec = decision_patch(request.app[SETTINGS]["user"], decision, text or None)
    decided = await session.decide_approval(api, _namespace(request), name, spec)
    return web.json_response(views.approval_view(decided))


def build_app(api: KubeApi, *, namespace: str, user: str, launch: guard.Launch) -> web.Application:
    """The application; `settings["port"]` is filled in once the socket is bound."""
    app = web.Application(middlewares=[guarded], client_max_size=64 * 1024)
    app[API] = api
    app[LAUNCH] = launch
    app[SETTINGS] = {"namespace": namespace, "user": user, "port": 0}
    app.router.add_get("/", index)
    app.router.add_get(guard.LOGIN_PATH, login)
    app.router.add_get("/runs", runs_page)
    app.router.add_get("/runs/{name}", run_page)
    app.router.add_get("/approvals", approvals_page)
    app.router.add_get("/workflows", workflows_page)
    app.router.add_get("/workflows/{name}", workflow_page)
    app.router.add_get("/events/runs", runs_events)
    app.router.add_get("/events/runs/{name}", run_events)
    app.router.add_get("/events/runs/{name}/logs/{step}", step_logs_events)
    app.router.add_get("/events/approvals", approvals_events)
    app.router.add_get("/api/workflows", workflows_json)
    app.router.add_get("/api/workflows/{name}", workflow_json)
    app.router.add_post("/api/approvals/{name}", decide)
    history.add_routes(app, api=API, settings=SETTINGS, page=_page)
    app.router.add_static("/static/", str(STATIC), append_version=False)
    return app
