"""The archive's read API, served as the aggregated API `archive.towline.dev/v1alpha1` (as metrics-server serves
metrics.k8s.io): `kubectl get archivedruns -n NS`, with the API server authenticating the person.

Served over HTTPS by the archive process (`ArchiveApiServer`), behind the APIService the chart registers:

- discovery (`/apis`, `/apis/archive.towline.dev`, `/apis/archive.towline.dev/v1alpha1`), `/healthz`, `/readyz`:
  to anyone (they say only that the API exists; the API server's availability check reads discovery);
- `GET .../namespaces/NS/archivedruns` (filters: workflow, requester, approver, phase, since, until,
  labelSelector, limit, continue): to a person who may `list workflowruns` (towline.dev) in NS, as a Table when
  kubectl asks for one, else an ArchivedRunList;
- `GET .../namespaces/NS/archivedruns/NAME`: to one who may `get workflowruns` in NS;
- `GET .../namespaces/NS/archivedruns/NAME/log?step=ID` (text/plain): to one who may `get workflowruns` and
  `get pods/log` in NS;
- `GET .../archivedruns` (every namespace): to one who may `list workflowruns` in every namespace, only.

Who is asking comes from the front proxy (towline.archive.apiauth); whether they may, from the API server's own
authorizer by SubjectAccessReview. The records come through `ArchiveReader`, read-only. Never writes anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from towline.archive import apiobjects as objects
from towline.archive.apiauth import (
    Authorizer,
    FrontProxyConfig,
    Question,
    SwappableContext,
    UserInfo,
    front_proxy_user,
    read_front_proxy_config,
    server_ssl_context,
)
from towline.archive.apiobjects import ApiProblem
from towline.archive.records import ArchivedRun, ArchiveError, Entry, HistoryPage, HistoryQuery
from towline.k8s.client import ApiError, KubeApi

log = logging.getLogger("towline.archive.api")

RUNS = ("towline.dev", "workflowruns")
BASE = f"/apis/{objects.GROUP_VERSION}"
REFRESH_SECONDS = 60.0
"""How often the front-proxy CA (the API server's ConfigMap) and the serving certificate's files are read again."""


class ArchiveReader(Protocol):
    """What the API reads from the archive (towline.archive.store's ArchiveStore answers it). Blocking calls: the
    server makes them on worker threads."""

    def namespaces(self) -> list[str]:
        """Namespaces that have an archive, in name order."""
        ...

    def history(self, query: HistoryQuery) -> HistoryPage:
        """Archived runs matching every filter given, newest first, one page at a time."""
        ...

    def run(self, namespace: str, name_or_uid: str) -> ArchivedRun | None:
        """An archived run by UID, else the newest archived run of that name."""
        ...

    def logs(self, namespace: str, run: str, step: str | None = None) -> list[Entry]:
        """A run's archived log records (run by name or UID), of one step or all, by attempt."""
        ...

    def export(self, namespace: str, since: datetime | None = None) -> Iterator[str]:
        """The namespace's chain as JSON lines (towline.archive.exports), verifiable offline."""
        ...


@dataclass(frozen=True)
class ApiSettings:
    """Where the API listens and with which certificate (the chart mounts it from a Secret)."""

    cert_file: Path
    key_file: Path
    port: int = 8443
    address: str | None = None
    """None: every address of the pod."""


def api_settings_from(env: Mapping[str, str]) -> ApiSettings | None:
    """TOWLINE_ARCHIVE_API_CERT_FILE and TOWLINE_ARCHIVE_API_KEY_FILE (both, or neither: no API),
    TOWLINE_ARCHIVE_API_PORT (8443), TOWLINE_ARCHIVE_API_ADDRESS (every address)."""
    cert, key = env.get("TOWLINE_ARCHIVE_API_CERT_FILE", ""), env.get("TOWLINE_ARCHIVE_API_KEY_FILE", "")
    if not cert and not key:
        return None
    if not cert or not key:
        missing = "TOWLINE_ARCHIVE_API_KEY_FILE" if cert else "TOWLINE_ARCHIVE_API_CERT_FILE"
        raise ValueError(f"{missing} is not set: the archive API needs its serving certificate and its key "
                         "(the chart mounts both from the archive's TLS Secret)")
    port_text = env.get("TOWLINE_ARCHIVE_API_PORT") or "8443"
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"TOWLINE_ARCHIVE_API_PORT={port_text!r} is not a port; set it to e.g. 8443")
    return ApiSettings(cert_file=Path(cert), key_file=Path(key), port=int(port_text),
                       address=env.get("TOWLINE_ARCHIVE_API_ADDRESS") or None)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: Mapping[str, Any], status: int = 200) -> web.Response:
    return web.json_response(dict(body), status=status)


def problem_response(problem: ApiProblem) -> web.Response:
    return _json(objects.status(problem.code, problem.reason, problem.message, problem.details), problem.code)


class Authorizes(Protocol):
    async def allowed(self, user: UserInfo, question: Question) -> bool: ...


class ArchiveApi:
    """The routes and their checks, apart from the listening socket (tests serve it over any TLS they like)."""

    def __init__(self, reader: ArchiveReader, authorizer: Authorizes, front_proxy: FrontProxyConfig) -> None:
        self.reader = reader
        self.authorizer = authorizer
        self.front_proxy = front_proxy

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._problems])
        app.router.add_get("/healthz", self._ok)
        app.router.add_get("/livez", self._ok)
        app.router.add_get("/readyz", self._ok)
        app.router.add_get("/apis", self._discovery(objects.api_group_list()))
        app.router.add_get(f"/apis/{objects.GROUP}", self._discovery(objects.api_group()))
        app.router.add_get(BASE, self._discovery(objects.api_resource_list()))
        app.router.add_get(f"{BASE}/{objects.RESOURCE}", self._list_everywhere)
        app.router.add_get(f"{BASE}/namespaces/{{namespace}}/{objects.RESOURCE}", self._list)
        app.router.add_get(f"{BASE}/namespaces/{{namespace}}/{objects.RESOURCE}/{{name}}", self._get)
        app.router.add_get(f"{BASE}/namespaces/{{namespace}}/{objects.RESOURCE}/{{name}}/{objects.LOG_SUBRESOURCE}",
                           self._log)
        app.router.add_get(f"{BASE}/namespaces/{{namespace}}/{objects.CHAIN_RESOURCE}/{objects.CHAIN_NAME}/"
                           f"{objects.EXPORT_SUBRESOURCE}", self._export)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    @web.middleware
    async def _problems(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiProblem as problem:
            return problem_response(problem)
        except web.HTTPMethodNotAllowed:
            return problem_response(ApiProblem(405, "MethodNotAllowed", f"{request.method} is not supported: the "
                                                                        "archive is read-only (get, list)"))
        except ArchiveError as error:
            return problem_response(ApiProblem(400, "BadRequest", str(error)))
        except ApiError as error:
            log.warning("asking the API server's authorizer failed: %s", error)
            return problem_response(ApiProblem(503, "ServiceUnavailable", "the archive could not ask the API "
                                                                          "server's authorizer; try again"))

    async def _ok(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    @staticmethod
    def _discovery(body: Mapping[str, Any]) -> Handler:
        async def answer(_: web.Request) -> web.Response:
            return _json(body)

        return answer

    async def _unknown(self, request: web.Request) -> web.Response:
        if request.method != "GET":
            raise ApiProblem(405, "MethodNotAllowed", f"{request.method} is not supported: the archive is "
                                                      "read-only (get, list)")
        raise ApiProblem(404, "NotFound", f"{request.path} is not a path the archive serves")

    # -- who and may they ---------------------------------------------------------------------------------------

    def _user(self, request: web.Request) -> UserInfo:
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        user = front_proxy_user(self.front_proxy, peer, request.headers)
        if user is None:
            raise ApiProblem(401, "Unauthorized", "the archive answers only requests the Kubernetes API server "
                                                  "proxies for a person it authenticated: use kubectl (kubectl get "
                                                  "archivedruns.archive.towline.dev)")
        return user

    async def _require(self, user: UserInfo, verb: str, namespace: str, *questions: Question) -> None:
        for question in questions:
            if not await self.authorizer.allowed(user, question):
                raise objects.forbidden(user.name, verb, objects.RESOURCE, namespace,
                                        needs=f"the archive shows it to whoever may {question.describe()}")

    # -- reads --------------------------------------------------------------------------------------------------

    async def _list(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        user = self._user(request)
        await self._require(user, "list", namespace, Question("list", *RUNS, namespace))
        query = objects.history_query(namespace, request.query)
        page = await asyncio.to_thread(self.reader.history, query)
        return self._runs(request, page.runs, page.continue_token)

    async def _list_everywhere(self, request: web.Request) -> web.Response:
        user = self._user(request)
        await self._require(user, "list", "", Question("list", *RUNS, ""))
        query = objects.history_query("", request.query)
        namespaces = await asyncio.to_thread(self.reader.namespaces)
        start, inner = (objects.decode_all_continue(query.continue_token) if query.continue_token
                        else (namespaces[0] if namespaces else "", None))
        runs: list[ArchivedRun] = []
        token: str | None = None
        for namespace in (ns for ns in namespaces if ns >= start):
            wanted = query.limit - len(runs)
            page = await asyncio.to_thread(self.reader.history, HistoryQuery(
                namespace=namespace, workflow=query.workflow, requester=query.requester, approver=query.approver,
                phase=query.phase, started_from=query.started_from, started_before=query.started_before,
                labels=query.labels, limit=wanted, continue_token=inner if namespace == start else None))
            runs += page.runs
            if page.continue_token is not None:
                token = objects.encode_all_continue(namespace, page.continue_token)
                break
            if len(runs) >= query.limit:
                later = [ns for ns in namespaces if ns > namespace]
                token = objects.encode_all_continue(later[0], None) if later else None
                break
        return self._runs(request, runs, token)

    async def _get(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        user = self._user(request)
        await self._require(user, "get", namespace, Question("get", *RUNS, namespace))
        run = await asyncio.to_thread(self.reader.run, namespace, name)
        if run is None:
            raise objects.not_found(name, namespace)
        if objects.wants_table(request.headers.get("Accept", "")):
            return _json(objects.table([run], None))
        return _json(objects.archived_run(run))

    async def _log(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        user = self._user(request)
        await self._require(user, "get", namespace, Question("get", *RUNS, namespace),
                            Question("get", "", "pods", namespace, "log"))
        run = await asyncio.to_thread(self.reader.run, namespace, name)
        if run is None:
            raise objects.not_found(name, namespace)
        step = request.query.get("step") or None
        entries = await asyncio.to_thread(self.reader.logs, namespace, run.uid, step)
        if not entries:
            what = f'step "{step}" of the run' if step else "the run"
            raise ApiProblem(404, "NotFound", f'the archive holds no log of {what} "{name}" in the namespace '
                                              f'"{namespace}"')
        return web.Response(text=objects.log_text(entries, step), content_type="text/plain", charset="utf-8")

    async def _export(self, request: web.Request) -> web.StreamResponse:
        """The namespace's whole record (runs, approvals, logs, checkpoints) as JSON lines: for whoever may list its
        WorkflowRuns and read its pods' logs, since the export holds both."""
        namespace = request.match_info["namespace"]
        user = self._user(request)
        await self._require(user, "get", namespace, Question("list", *RUNS, namespace),
                            Question("get", "", "pods", namespace, "log"))
        since = objects.since_of(request.query)
        lines = await asyncio.to_thread(lambda: list(self.reader.export(namespace, since)))
        response = web.StreamResponse(headers={"Content-Type": "application/jsonl; charset=utf-8"})
        await response.prepare(request)
        for line in lines:
            await response.write(line.encode())
        await response.write_eof()
        return response

    def _runs(self, request: web.Request, runs: list[ArchivedRun], token: str | None) -> web.Response:
        if objects.wants_table(request.headers.get("Accept", "")):
            return _json(objects.table(runs, token))
        return _json(objects.archived_run_list(runs, token))


class ArchiveApiServer:
    """The API on its HTTPS port, its TLS context renewed every `refresh_seconds` from the API server's ConfigMap
    and the certificate files (a rotated CA or a renewed certificate applies to new connections)."""

    def __init__(self, kube: KubeApi, reader: ArchiveReader, settings: ApiSettings, *,
                 refresh_seconds: float = REFRESH_SECONDS) -> None:
        self.kube, self.reader, self.settings = kube, reader, settings
        self.refresh_seconds = refresh_seconds
        self._runner: web.AppRunner | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._api: ArchiveApi | None = None
        self._context: SwappableContext | None = None

    async def start(self) -> ArchiveApiServer:
        config = await read_front_proxy_config(self.kube)
        self._api = ArchiveApi(self.reader, Authorizer(self.kube), config)
        self._context = SwappableContext(server_ssl_context(self.settings.cert_file, self.settings.key_file, config))
        self._runner = web.AppRunner(self._api.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.address, self.settings.port,
                           ssl_context=self._context.listening)
        await site.start()
        self._refresher = asyncio.create_task(self._refresh_forever())
        log.info("archive API serving %s on port %d", objects.GROUP_VERSION, self.settings.port)
        return self

    async def stop(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                config = await read_front_proxy_config(self.kube)
                context = server_ssl_context(self.settings.cert_file, self.settings.key_file, config)
            except (ApiError, OSError, ValueError, RuntimeError) as error:
                log.warning("archive API: keeping the TLS settings it has; reading new ones failed: %s", error)
                continue
            assert self._api is not None and self._context is not None
            self._api.front_proxy = config
            self._context.replace(context)


async def serve_archive_api(kube: KubeApi, reader: ArchiveReader,
                            env: Mapping[str, str] = os.environ) -> ArchiveApiServer | None:
    """Start the API when the environment names its certificate (see `api_settings_from`), else None."""
    settings = api_settings_from(env)
    if settings is None:
        log.info("archive API off: TOWLINE_ARCHIVE_API_CERT_FILE is not set")
        return None
    return await ArchiveApiServer(kube, reader, settings).start()
