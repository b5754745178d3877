"""The web view's History page: the archive's runs (archive.towline.dev), read as the person.

The archive is an aggregated API: the API server authenticates the person and the archive answers only what
Kubernetes RBAC lets them read (list/get WorkflowRuns for runs, and get pods/log for their logs). This module
holds no right of its own: every read goes through the person's KubeApi, and a refusal is shown naming the
right that is missing. An archived run's record keeps the WorkflowRun object as it was (`record.run`), so the
run page's own view (views.run_detail of runtree.archived_run_tree) draws it as it draws a live run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from towline.api.common import DNS_SUBDOMAIN_PATTERN
from towline.jsontypes import JSON
from towline.k8s.client import ApiError, KubeApi
from towline.lenient import as_mapping, as_text
from towline.plugin.history import archived_log, runs_path
from towline.plugin.keptrecords import kept_record, kept_run
from towline.plugin.runtree import archived_run_tree, run_facts
from towline.plugin.ui import person, views

PageRenderer = Callable[[web.Request, str, str], web.Response]

FILTERS = ("workflow", "requester", "approver", "phase", "since", "until", "labelSelector")
"""What `kubectl towline history` filters on, named as the archive's list takes them."""
DEFAULT_LIMIT = "50"
MAX_TEXT = 253
RIGHTS = {
    "list": "list workflowruns (towline.dev)",
    "get": "get workflowruns (towline.dev)",
    "log": "get workflowruns (towline.dev) and get pods/log",
}
DOING = {"list": "list archived runs", "get": "read this archived run", "log": "read this archived run's logs"}
NOT_INSTALLED = ("The archive is not installed: this cluster serves no archive.towline.dev API. Install the chart "
                 "with archive.enabled=true (docs/archive.md).")


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _chain(item: JSON) -> JSON:
    chain = as_mapping(item.get("chain"))
    return {key: chain.get(key) for key in ("seq", "digest", "prevDigest", "recordedAt")}


def archived_summary(item: JSON) -> JSON:
    """One row of the History list: the archive's own columns, and the run's trigger as it recorded it."""
    meta = as_mapping(item.get("metadata"))
    return {
        "name": as_text(meta.get("name")),
        "uid": as_text(meta.get("uid")),
        "labels": {str(k): str(v) for k, v in as_mapping(meta.get("labels")).items()},
        "workflow": as_text(item.get("workflow")),
        "phase": as_text(item.get("phase")) or "Pending",
        "requestedBy": as_text(item.get("requester")),
        "approvers": [str(name) for name in _items(item.get("approvers"))],
        "trigger": run_facts(kept_run(item)).trigger.type,
        "startedAt": as_text(item.get("startedAt")),
        "finishedAt": as_text(item.get("finishedAt")),
        "deletedBeforeItEnded": kept_record(item).get("deletedBeforeItEnded") is True,
        "chain": _chain(item),
    }


def archived_approval(approval: JSON) -> JSON:
    """An approval as the record kept it: who decided, when, and why."""
    return {**views.approval_view(approval), "decidedAt": as_mapping(approval.get("status")).get("decidedAt")}


def archived_detail(item: JSON) -> JSON:
    """An archived run's page: the run page's own view of the kept run, plus what only the archive knows."""
    record = kept_record(item)
    approvals = [a for a in _items(record.get("approvals")) if isinstance(a, dict)]
    logs = [log for log in _items(record.get("logs")) if isinstance(log, dict)]
    return {
        **views.run_detail(archived_run_tree(item)),
        **{key: value for key, value in archived_summary(item).items() if value is not None},
        "approvals": [archived_approval(a) for a in approvals],
        "logs": [{key: log.get(key) for key in ("step", "attempt", "container", "truncated")} for log in logs],
    }


def history_query(params: Mapping[str, str]) -> dict[str, str]:
    """The archive list's query from the page's: the history filters, a page size and the continue token."""
    query = {}
    for key in (*FILTERS, "continue"):
        value = (params.get(key) or "").strip()
        if len(value) > (4096 if key == "continue" else MAX_TEXT):
            raise person.BadInputError(f"{key}: at most {MAX_TEXT} characters")
        if value:
            query[key] = value
    limit = (params.get("limit") or DEFAULT_LIMIT).strip()
    if not limit.isdigit() or not 1 <= int(limit) <= 500:
        raise person.BadInputError(f"limit={limit!r}: write a whole number of runs per page from 1 to 500")
    query["limit"] = limit
    return query


def run_name(text: str) -> str:
    if len(text) > MAX_TEXT or not re.fullmatch(DNS_SUBDOMAIN_PATTERN, text):
        raise person.BadInputError(f"run name {text[:80]!r} is not a Kubernetes object name (lower-case letters, "
                            "digits, - and .)")
    return text


def refusal(error: ApiError, *, user: str, namespace: str, action: str) -> tuple[int, JSON]:
    """What the page says when the API server or the archive refused: the missing right, or that there is no
    archive, with the server's own words kept."""
    status = error.status
    if status == 403:
        verb = "list" if action == "list" else "get"
        message = (f"{user} may not {DOING[action]} in namespace {namespace}: the archive shows that only to whoever "
                   f"may {RIGHTS[action]} there. Ask for a Role that grants it (`kubectl auth can-i {verb} "
                   f"workflowruns.towline.dev -n {namespace}` checks). The API server said: {error.message}")
        return 403, {"status": 403, "problem": "forbidden", "right": RIGHTS[action], "message": message}
    if status == 404 and not _from_archive(error):
        return 404, {"status": 404, "problem": "not-installed", "message": NOT_INSTALLED}
    if status == 404:
        return 404, {"status": 404, "problem": "not-found", "message": error.message}
    if status == 503:
        return 503, {"status": 503, "problem": "unavailable", "message": (
            "The archive is installed but does not answer (the API server could not reach it; docs/archive.md, "
            f"Reading the archive): {error.message}")}
    code = status if 400 <= status < 600 else 502
    return code, {"status": status, "problem": "bad-request" if status == 400 else "error", "message": error.message}


def _from_archive(error: ApiError) -> bool:
    """A 404 the archive wrote (no such run, no such log) rather than the API server's for an unserved group."""
    details = error.body.get("details") if isinstance(error.body, dict) else None
    return (isinstance(details, dict) and details.get("group") == "archive.towline.dev") or "archive" in error.message


def add_routes(app: web.Application, *, page: PageRenderer) -> None:
    """Register the History pages and their JSON on the web view's application."""

    def context(request: web.Request) -> tuple[KubeApi, str, str]:
        return person.api(request), person.namespace(request), person.user(request)

    def refused(request: web.Request, error: ApiError, action: str) -> web.Response:
        _, namespace, user = context(request)
        status, body = refusal(error, user=user, namespace=namespace, action=action)
        return web.json_response(body, status=status)

    async def history_page(request: web.Request) -> web.StreamResponse:
        return page(request, "history", "")

    async def archived_page(request: web.Request) -> web.StreamResponse:
        return page(request, "archived", request.match_info["name"])

    async def list_json(request: web.Request) -> web.StreamResponse:
        client, namespace, _ = context(request)
        try:
            answer = await client.request("GET", runs_path(namespace), query=history_query(request.query))
        except ApiError as error:
            return refused(request, error, "list")
        items = [item for item in _items(answer.get("items")) if isinstance(item, dict)]
        return web.json_response({"runs": [archived_summary(item) for item in items],
                                  "continue": as_mapping(answer.get("metadata")).get("continue") or None})

    async def run_json(request: web.Request) -> web.StreamResponse:
        client, namespace, _ = context(request)
        try:
            answer = await client.request("GET", f"{runs_path(namespace)}/{run_name(request.match_info['name'])}")
        except ApiError as error:
            return refused(request, error, "get")
        return web.json_response(archived_detail(answer))

    async def log_text(request: web.Request) -> web.StreamResponse:
        client, namespace, _ = context(request)
        step = (request.query.get("step") or "").strip() or None
        try:
            text = await archived_log(client, namespace, run_name(request.match_info["name"]), step)
        except ApiError as error:
            return refused(request, error, "log")
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    person.add_get(app, "/history", history_page)
    person.add_get(app, "/history/{name}", archived_page)
    person.add_get(app, "/api/history", list_json)
    person.add_get(app, "/api/history/{name}", run_json)
    person.add_get(app, "/api/history/{name}/log", log_text)
