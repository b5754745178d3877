"""The web view's writes beyond approvals: start a run from the params form, and cancel, suspend, resume,
retry and resubmit a run; and the reads that go with them (the form, a run's Events).

Every call is made with the person's own API client (towline.plugin.ui.person), so RBAC and Towline's
admission policies decide exactly as for kubectl; a refusal reaches the page in the API server's words. The
operations are the plugin's own (towline.plugin.runactions, the run manifest): nothing here builds a patch or
a run of its own. Every write is a POST, which the guard refuses without the page's write-protection token
or from another origin before any handler runs. Never reads a Secret.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import EVENTS, ApiError, KubeApi
from towline.plugin import manifests, runactions
from towline.plugin.runtree import run_tree
from towline.plugin.ui import forms, person, views
from towline.plugin.ui.history import run_name
from towline.plugin.ui.sse import follow_collection, open_stream

PageRenderer = Callable[[web.Request, str, str], web.Response]
_DONE = {"cancel": "cancel requested", "stop": "stopped (no finally steps)", "suspend": "suspended",
         "resume": "resumed"}


def problem(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"status": status, "message": message, **extra}, status=status)


def run_page_view(run: JSON) -> JSON:
    """The run page's document: the display model, and the operations that apply to the run as it stands."""
    return {**views.run_detail(run_tree(run)), "actions": runactions.available(run)}


def event_view(event: JSON) -> JSON:
    """One core/v1 Event about a run, as the run page lists it."""
    source = event.get("source") or {}
    return {
        "type": event.get("type"), "reason": event.get("reason"), "message": event.get("message"),
        "count": event.get("count") or 1,
        "first": event.get("firstTimestamp") or event.get("eventTime") or
        (event.get("metadata") or {}).get("creationTimestamp"),
        "last": event.get("lastTimestamp") or event.get("eventTime"),
        "from": event.get("reportingComponent") or source.get("component"),
        "uid": (event.get("metadata") or {}).get("uid"),
    }


async def _body(request: web.Request) -> Any:
    try:
        return json.loads(await request.text() or "{}")
    except ValueError:
        return None


async def form_json(request: web.Request) -> web.StreamResponse:
    """The start form of a Workflow: its params as fields."""
    api, namespace, name = person.api(request), person.namespace(request), run_name(request.match_info["name"])
    workflow = await session.get_workflow(api, namespace, name)
    if workflow is None:
        return problem(404, f"no Workflow {name!r} in namespace {namespace}")
    return web.json_response({"workflow": name, "namespace": namespace, "fields": forms.form_fields(workflow)})


async def start_run(request: web.Request) -> web.StreamResponse:
    """Check the answers with the operator's rule, then create the run as the person (requestedBy: who they are)."""
    api, namespace, name = person.api(request), person.namespace(request), run_name(request.match_info["name"])
    workflow = await session.get_workflow(api, namespace, name)
    if workflow is None:
        return problem(404, f"no Workflow {name!r} in namespace {namespace}")
    params, problems = forms.read_answers(workflow, await _body(request))
    if problems:
        fields = "; ".join(message for message in problems.values())
        return problem(400, f"nothing was created: {fields}", fields=problems)
    user = await session.who_am_i(api)
    run = await session.create_run(api, namespace, manifests.run_manifest(name, params, user))
    created = run["metadata"]["name"]
    return web.json_response({"run": created, "message": f"workflowrun/{created} created (requested by {user})"},
                             status=201)


async def run_action(request: web.Request) -> web.StreamResponse:
    """cancel, stop, suspend, resume, retry or resubmit, as `kubectl towline` does them, as the person."""
    api, namespace = person.api(request), person.namespace(request)
    name, action = run_name(request.match_info["name"]), request.match_info["action"]
    if action not in runactions.ACTIONS:
        return problem(404, f"no action {action!r}: one of {', '.join(runactions.ACTIONS)}")
    run = await session.get_run(api, namespace, name)
    if run is None:
        return problem(404, f"no WorkflowRun {name!r} in namespace {namespace}")
    if action == "retry":
        return await _retry(api, namespace, run, await _body(request))
    if action == "resubmit":
        user = await session.who_am_i(api)
        new = (await runactions.resubmit(api, namespace, run, user))["metadata"]["name"]
        return web.json_response({"run": new, "message": f"workflowrun/{new} created: resubmit of {name} "
                                  f"(requested by {user})"}, status=201)
    switched = await runactions.switch(api, namespace, run, action)  # type: ignore[arg-type]
    return web.json_response({"run": name, "message": f"workflowrun/{name} {_DONE[action]}",
                              "actions": runactions.available(switched)})


async def _retry(api: KubeApi, namespace: str, run: JSON, body: Any) -> web.StreamResponse:
    """`kubectl towline retry [--workflow-changed] [-p NAME=VALUE ...]` from the run page's options: the answers
    typed by the Workflow now, then the plugin's own retry, which refuses what the operator would."""
    name = run["metadata"]["name"]
    answers = body.get(forms.FORM_FIELD) if isinstance(body, dict) else None
    workflow = await session.get_workflow(api, namespace, run["spec"]["workflowRef"]["name"]) if answers else None
    workflow_changed, params, problems = forms.read_retry(workflow, body)
    if problems:
        return problem(400, f"nothing was created: {'; '.join(problems.values())}", fields=problems)
    try:
        created, reused = await runactions.retry(api, namespace, run, await session.who_am_i(api),
                                                 workflow_changed=workflow_changed, params=params)
    except manifests.UsageError as error:
        return problem(409, str(error))
    new = created["metadata"]["name"]
    under = " under the Workflow as it is now" if workflow_changed else ""
    changed = f", with {', '.join(f'{k}={json.dumps(v)}' for k, v in params.items())}" if params else ""
    return web.json_response({"run": new, "message": f"workflowrun/{new} created: retry of {name}{under}{changed}, "
                              f"reusing {', '.join(reused) or 'no steps'}"}, status=201)


async def run_events(request: web.Request) -> web.StreamResponse:
    """The run's Events, live: the list, then each new or updated one."""
    name = run_name(request.match_info["name"])
    response, send = await open_stream(request)
    await follow_collection(
        person.api(request), EVENTS.path(person.namespace(request)), send,
        field_selector=f"involvedObject.kind=WorkflowRun,involvedObject.name={name}",
        snapshot=lambda items: [event_view(e) for e in items],
        change=lambda kind, event: {"type": kind, "event": event_view(event)},
    )
    return response


async def all_runs(request: web.Request) -> web.StreamResponse:
    """Runs of every namespace the person may list: the cluster-wide list if RBAC allows it, else each namespace
    the person may see, one at a time; a namespace whose runs they may not list is named with the refusal."""
    api = person.api(request)
    try:
        runs = await session.list_runs(api, None)
        return web.json_response({"runs": [_with_namespace(r) for r in views.newest_first(runs)], "refused": []})
    except ApiError as error:
        if error.status != 403:
            raise
    runs, refused = [], []
    for namespace in await visible_namespaces(api, person.namespace(request)):
        try:
            runs += await session.list_runs(api, namespace)
        except ApiError as error:
            if error.status not in (403, 404):
                raise
            refused.append({"namespace": namespace, "message": error.message})
    return web.json_response({"runs": [_with_namespace(r) for r in views.newest_first(runs)], "refused": refused})


def _with_namespace(run: JSON) -> JSON:
    return {**views.run_summary(run), "namespace": (run.get("metadata") or {}).get("namespace")}


async def visible_namespaces(api: KubeApi, current: str) -> list[str]:
    """The namespaces the person may list, or (when they may not list namespaces) the one in use."""
    try:
        listed = await session.list_namespaces(api)
    except ApiError as error:
        if error.status != 403:
            raise
        return [current]
    return sorted({(n.get("metadata") or {}).get("name", "") for n in listed} - {""})


async def namespaces_json(request: web.Request) -> web.StreamResponse:
    """The namespace switcher's choices: those the person may list, else only the one in use, saying why."""
    api, current = person.api(request), person.namespace(request)
    names = await visible_namespaces(api, current)
    note = None if names != [current] else (f"{person.user(request)} may not list namespaces: showing {current} "
                                            "only (open /ns/NAME/runs for another)")
    return web.json_response({"current": current, "namespaces": names, "note": note})


def run_stream_change(kind: str, run: JSON) -> JSON | None:
    return None if kind == "DELETED" else run_page_view(run)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_routes(app: web.Application, *, page: PageRenderer) -> None:
    async def start_page(request: web.Request) -> web.StreamResponse:
        return page(request, "start", run_name(request.match_info["name"]))

    async def all_runs_page(request: web.Request) -> web.StreamResponse:
        return page(request, "allruns", "")

    person.add_get(app, "/workflows/{name}/start", start_page)
    person.add_get(app, "/api/workflows/{name}/form", form_json)
    person.add_post(app, "/api/workflows/{name}/runs", start_run)
    person.add_post(app, "/api/runs/{name}/{action}", run_action)
    person.add_get(app, "/events/runs/{name}/events", run_events)
    person.add_get(app, "/api/namespaces", namespaces_json)
    app.router.add_get("/all/runs", all_runs_page)
    app.router.add_get("/api/all/runs", all_runs)
