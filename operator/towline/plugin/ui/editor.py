"""The visual editor's server side: its page, what it offers (the catalogue, the examples), a live Workflow as
YAML, and its checks, diff and apply, all as the signed-in person (docs/web-view.md, "Editor").

Every API call goes through `person.api(request)`, so RBAC and the chart's admission policies decide exactly as
for kubectl; the editor holds no right of its own. Its checks are the ones the cluster makes: the offline
validator `kubectl towline validate` runs (with the namespace's step types, read as the person), then a
server-side dry run (`dryRun=All`) of the apply, whose refusals come back on the fields they concern. Applying is
off unless the chart's `ui.editor.allowApply` (`kubectl towline ui --allow-apply`) turns it on, and never for an
object Argo CD or Flux manage: git stays the source of truth. Never reads a Secret (the catalogue lists Secret
names as metadata only), never evaluates or fetches anything the YAML names.
"""

from __future__ import annotations

import asyncio
import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import WORKFLOWS, ApiError, resource_version
from towline.k8s.steptypes import list_step_types
from towline.plugin.connectors import catalog_document, step_types_of
from towline.plugin.manifests import clean_workflow
from towline.plugin.offline import StepTypeDocument, catalog_for
from towline.plugin.ui import person
from towline.plugin.ui.actions import PageRenderer, problem
from towline.plugin.ui.editorcheck import (
    GITOPS_TOOLS,
    MAX_YAML_BYTES,
    Problem,
    YamlRefused,
    document_problems,
    load_document,
    managed_by,
    normalised,
    refusal_problems,
    spec_path,
    unified_diff,
)
from towline.plugin.ui.history import run_name
from towline.validation import validate_workflow_manifest
from towline.validation.catalog import connector_catalog
from towline.validation.editorschema import action_inputs_schema, contained, workflow_schema

FIELD_MANAGER = "towline-editor"
"""The field manager of the editor's server-side apply (and of its dry runs)."""
MAX_BODY_BYTES = MAX_YAML_BYTES
ALLOW_APPLY = web.AppKey("editor_allow_apply", bool)
"""Whether the editor may apply (`ui.editor.allowApply`, `kubectl towline ui --allow-apply`); off by default."""
APPLY_OFF = ("applying from the editor is off: the chart's ui.editor.allowApply (kubectl towline ui --allow-apply) "
             "turns it on; until then download or copy the YAML and commit it")
_REPOSITORY_EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
"""A checkout's examples (an editable install runs from one): the files as they are now."""
_PACKAGED_EXAMPLES = Path(sys.prefix) / "share" / "towline" / "examples"
"""Where the operator's wheel puts them (pyproject.toml's data-files): the plugin's venv, the image's /opt/towline."""
TRIGGER_FIELDS = {"webhook": "webhook", "cron": "schedule", "cloudEvent": "cloudEvent"}
"""The editor's trigger kinds -> the field of spec.triggers[] that holds each (manual needs none)."""


@lru_cache(maxsize=1)
def _schema() -> JSON:
    return workflow_schema()


def step_kinds() -> list[str]:
    """The kinds of step the editor offers: a built-in action, a step type, a code step (all `action:`), and each
    other kind the Workflow CRD knows (a step holds exactly one of them)."""
    crd_kinds = [branch["required"][0] for branch in _schema()["definitions"]["Step"]["oneOf"]]
    return ["action", "stepType", "code", *(kind for kind in crd_kinds if kind != "action")]


def trigger_schemas() -> JSON:
    trigger = _schema()["definitions"]["Trigger"]["properties"]
    found: JSON = {"manual": {"field": None, "description": "Always allowed: a person starts a run (kubectl "
                                                             "towline run, the web view's start form)."}}
    for kind, field in TRIGGER_FIELDS.items():
        found[kind] = {"field": field, "schema": contained(_schema(), trigger[field])}
    return found


@lru_cache(maxsize=1)
def builtin_actions() -> list[JSON]:
    """The built-in actions as the catalogue lists them (the same for every person: computed once)."""
    catalog, described = connector_catalog(), catalog_document([])["actions"]
    return [{
        "name": name, "title": name, "description": described.get(name, {}).get("summary", ""),
        "schema": action_inputs_schema(_schema(), name),
        "credentials": sorted({alias for alias, _ in catalog.credential_refs(name, {})}),
        "code": catalog.is_code(name),
    } for name in catalog.known_actions()]


async def _step_type_documents(request: web.Request) -> list[JSON]:
    """The namespace's StepTypes and the cluster's ClusterStepTypes the person may list ([] for those they may not)."""
    try:
        namespaced, cluster = await list_step_types(person.api(request), person.namespace(request))
    except ApiError as error:
        if error.status not in (403, 404):
            raise
        return []
    return [*namespaced, *(cluster or [])]


async def catalog_json(request: web.Request) -> web.StreamResponse:
    types, _ = step_types_of(await _step_type_documents(request))
    secrets: list[str] = []
    listable = True
    try:
        secrets = await session.secret_names(person.api(request), person.namespace(request))
    except ApiError as error:
        if error.status != 403:
            raise
        listable = False
    return web.json_response({
        "actions": builtin_actions(),
        "stepTypes": [{"kind": t.kind, "name": t.name, "schema": t.spec.inputs,
                       "credentials": [slot.name for slot in t.spec.credentials]} for t in types],
        "kinds": step_kinds(),
        "triggers": trigger_schemas(),
        "secrets": secrets,
        "secretsListable": listable,
    })


def examples_directory() -> Path | None:
    for directory in (_REPOSITORY_EXAMPLES, _PACKAGED_EXAMPLES):
        if directory.is_dir():
            return directory
    return None


async def examples_json(request: web.Request) -> web.StreamResponse:
    """The top-level examples/*.yaml, byte for byte."""
    directory = examples_directory()
    files = sorted(directory.glob("*.yaml")) if directory is not None else []
    return web.json_response([{"name": path.stem, "yaml": path.read_bytes().decode("utf-8")} for path in files])


def _as_yaml(document: JSON) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120)


async def _can_apply(request: web.Request, namespace: str, name: str, tool: str | None) -> bool:
    if not request.app[ALLOW_APPLY] or tool is not None:
        return False
    return await session.may_i(person.api(request), "patch", WORKFLOWS, namespace, name)


async def workflow_yaml(request: web.Request) -> web.StreamResponse:
    """A live Workflow as the YAML to edit: what `kubectl towline export` writes (no status, no server-set
    metadata), its resourceVersion, who manages it, and whether the editor may apply it as this person."""
    api, namespace, name = person.api(request), person.namespace(request), run_name(request.match_info["name"])
    workflow = await session.get_workflow(api, namespace, name)
    if workflow is None:
        return problem(404, f"no Workflow {name!r} in namespace {namespace}")
    tool = managed_by(workflow.get("metadata") or {})
    return web.json_response({
        "yaml": _as_yaml(clean_workflow(workflow)), "resourceVersion": resource_version(workflow),
        "generation": generation(workflow), "managedBy": tool,
        "canApply": await _can_apply(request, namespace, name, tool),
    })


def _too_large() -> person.BadInputError:
    return person.BadInputError(f"the request is larger than {MAX_BODY_BYTES // 1024} KiB (1 MiB), the editor's "
                                "limit: split the Workflow or shorten it", status=413)


async def read_body(request: web.Request) -> JSON:
    """The posted JSON object, at most MAX_BODY_BYTES (refused with 413 before more is read)."""
    if (request.content_length or 0) > MAX_BODY_BYTES:
        raise _too_large()
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("yaml"), str):
        raise person.BadInputError('send {"yaml": "<the Workflow as YAML text>"} as JSON')
    return body


def _namespaced(request: web.Request, document: Any) -> tuple[str, Any]:
    """The namespace the document is for (its own, else the page's), and the document naming it."""
    if not isinstance(document, dict) or not isinstance(document.get("metadata"), dict):
        return person.namespace(request), document
    namespace = document["metadata"].get("namespace") or person.namespace(request)
    return str(namespace), {**document, "metadata": {**document["metadata"], "namespace": namespace}}


READING = web.AppKey("editor_reading", asyncio.Semaphore)
"""Texts read at once (two): a 1 MiB text takes seconds of CPU (PyYAML), so a burst of them waits its turn rather
than taking every core of the view."""


async def _read(request: web.Request, text: str) -> tuple[Any, list[Problem]]:
    """The document, or the YAML problem; parsed off the event loop, at most two at a time."""
    try:
        async with request.app[READING]:
            return await asyncio.to_thread(load_document, text), []
    except YamlRefused as refused:
        return None, [Problem("", str(refused), "yaml")]


async def offline_problems(request: web.Request, namespace: str, document: JSON) -> list[Problem]:
    """`kubectl towline validate`'s rules, with the step types of the namespace and cluster the person may read."""
    types, _ = step_types_of(await _step_type_documents(request))
    usable = [StepTypeDocument("" if t.kind == "ClusterStepType" else namespace, t) for t in types]
    catalog = catalog_for(namespace, usable)
    _, errors = await asyncio.to_thread(validate_workflow_manifest, document["spec"], catalog)
    return [Problem(spec_path(error.field), error.message, "offline") for error in errors]


async def dry_run_problems(request: web.Request, namespace: str, document: JSON) -> list[Problem]:
    """The server-side dry run of the apply, as the person: admission policies' and the schema's refusals."""
    try:
        await session.apply_workflow(person.api(request), namespace, document, field_manager=FIELD_MANAGER,
                                     dry_run=True)
    except ApiError as error:
        return refusal_problems(error.status, error.message, error.body, document)
    return []


async def validate(request: web.Request) -> web.StreamResponse:
    body = await read_body(request)
    document, problems = await _read(request, body["yaml"])
    if not problems:
        problems = document_problems(document)
        if not problems:
            namespace, document = _namespaced(request, document)
            problems = [*await offline_problems(request, namespace, document),
                        *await dry_run_problems(request, namespace, document)]
    return web.json_response({"ok": not problems, "problems": [p.view() for p in problems]})


def _diff_side(document: Any) -> str:
    if isinstance(document, dict) and isinstance(document.get("metadata"), dict) and document["metadata"].get("name"):
        return normalised(clean_workflow(document))
    return normalised(document)


async def diff(request: web.Request) -> web.StreamResponse:
    body = await read_body(request)
    against = body.get("against", "live")
    if against not in ("live", "text") or (against == "text" and not isinstance(body.get("text"), str)):
        return problem(400, 'against must be "live" or "text" (with the uploaded file\'s text in "text")')
    document, problems = await _read(request, body["yaml"])
    if problems:
        return problem(400, f"the editor's YAML: {problems[0].message}", problems=[p.view() for p in problems])
    if against == "text":
        other, problems = await _read(request, body["text"])
        if problems:
            return problem(400, f"the uploaded file: {problems[0].message}", problems=[p.view() for p in problems])
        before, name = _diff_side(other), "uploaded"
    else:
        meta = document.get("metadata") if isinstance(document, dict) else None
        name = str((meta or {}).get("name") or "") if isinstance(meta, dict) else ""
        namespace, _ = _namespaced(request, document)
        live = await session.get_workflow(person.api(request), namespace, run_name(name)) if name else None
        before = _diff_side(live) if live is not None else ""
        name = f"live/{namespace}/{name}" if live is not None else "live (none)"
    after = _diff_side(document)
    return web.json_response({"diff": unified_diff(before, after, before_name=name, after_name="editor"),
                              "same": before == after})


def generation(workflow: JSON) -> int | None:
    """The Workflow's metadata.generation: raised by every change of its spec, never by the operator's status writes
    (which change the resourceVersion every few seconds while a Workflow is new)."""
    value = (workflow.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _changed_since(expected: Any, live: JSON | None) -> str | None:
    """How the live Workflow's spec differs from the generation the editor read, if it was given and differs."""
    if not isinstance(expected, int) or isinstance(expected, bool) or live is None or generation(live) == expected:
        return None
    return f"generation {expected}, now {generation(live)}"


async def apply(request: web.Request) -> web.StreamResponse:
    """Server-side apply as the person with FIELD_MANAGER (no force), only when allowed and not GitOps-managed."""
    if not request.app[ALLOW_APPLY]:
        return problem(403, APPLY_OFF)
    body = await read_body(request)
    document, problems = await _read(request, body["yaml"])
    problems = problems or document_problems(document)
    if problems:
        return web.json_response({"applied": False, "problems": [p.view() for p in problems]}, status=400)
    namespace, document = _namespaced(request, document)
    name = run_name(str(document["metadata"]["name"]))
    api = person.api(request)
    live = await session.get_workflow(api, namespace, name)
    tool = managed_by((live or {}).get("metadata") or {}) or managed_by(document["metadata"])
    if tool is not None:
        return problem(409, f"Workflow {name} is managed by {GITOPS_TOOLS[tool]}: change it in git (download or "
                            "copy the YAML); the editor does not apply it", managedBy=tool)
    stale = _changed_since(body.get("generation"), live)
    if stale is not None:
        return problem(409, f"Workflow {name} changed since the editor read it ({stale}): see the diff against "
                            "the live object, then apply again")
    try:
        applied = await session.apply_workflow(api, namespace, document, field_manager=FIELD_MANAGER)
    except ApiError as error:  # a Conflict (409) too: a field another manager owns, named by the API server
        status = error.status if 400 <= error.status < 600 else 502
        return web.json_response({"applied": False, "problems": [p.view() for p in refusal_problems(
            error.status, error.message, error.body, document)]}, status=status)
    return web.json_response({"applied": True, "resourceVersion": resource_version(applied),
                              "generation": generation(applied)})


def add_routes(app: web.Application, *, page: PageRenderer, allow_apply: bool) -> None:
    app[ALLOW_APPLY] = allow_apply
    app[READING] = asyncio.Semaphore(2)

    async def editor_page(request: web.Request) -> web.StreamResponse:
        name = request.match_info.get("name")
        return page(request, "editor", run_name(name) if name else "")

    person.add_get(app, "/editor", editor_page)
    person.add_get(app, "/editor/{name}", editor_page)
    person.add_get(app, "/api/editor/catalog", catalog_json)
    person.add_get(app, "/api/editor/examples", examples_json)
    person.add_get(app, "/api/editor/workflows/{name}", workflow_yaml)
    person.add_post(app, "/api/editor/validate", validate)
    person.add_post(app, "/api/editor/diff", diff)
    person.add_post(app, "/api/editor/apply", apply)
