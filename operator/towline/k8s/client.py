"""The one place Towline talks to the Kubernetes API server.

Every request goes through `KubeApi.request`, which is also where retries on
429/5xx and on an unreachable server, adoption on 409-at-create and the API-call
metrics live. Callers get plain JSON dicts, and every failure as an `ApiError`
(a server that cannot be reached is `ApiUnavailable`, a 503): they never hold a
client object of their own, nor see the transport's exceptions.

Never reads Secret values: no code path here requests a Secret (the ingress's
signing-key reader, `towline.k8s.secrets`, is the one exception, and the operator never imports it).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from prometheus_client import Counter, Histogram
from yarl import URL

from towline.jsontypes import JSON
from towline.k8s import kubeconfig as kubeconfig_loader
from towline.k8s.connection import Connection, in_cluster, tls_context

API_REQUESTS = Counter(
    "towline_api_requests_total", "Requests the operator made to the Kubernetes API.", ["verb", "resource", "code"]
)
API_LATENCY = Histogram("towline_api_request_seconds", "Latency of Kubernetes API requests.", ["verb", "resource"])
_LABELLED: dict[tuple[str, ...], Any] = {}
"""The metrics' children by label values: prometheus_client's `labels()` takes a lock and validates the values on
every call, twice per request."""


def _requests(verb: str, resource: str, code: str) -> Any:
    key = ("requests", verb, resource, code)
    child = _LABELLED.get(key)
    if child is None:
        child = _LABELLED[key] = API_REQUESTS.labels(verb, resource, code)
    return child


def _latency(verb: str, resource: str) -> Any:
    key = ("latency", verb, resource)
    child = _LABELLED.get(key)
    if child is None:
        child = _LABELLED[key] = API_LATENCY.labels(verb, resource)
    return child


TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
"""Answers that say "not now" rather than "no": the caller's work queue tries again later."""
# The API server asks for a second or so; a larger Retry-After (from a proxy in front of it) is capped
# so one answer cannot park a reconcile for hours.
MAX_API_RETRY_AFTER_SECONDS = 10.0


REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)


def resource_version(body: Mapping[str, Any]) -> str | None:
    """An object's metadata.resourceVersion: opaque (compared only for equality, never ordered or parsed)."""
    version = (body.get("metadata") or {}).get("resourceVersion")
    return version if isinstance(version, str) and version else None


class ApiError(Exception):
    """The API server refused a request; `status` and the server's `message` say why.

    The client never retries (retries live in one place: the work queue, which knows the key and its
    backoff); `transient` and `retry_after` are what it reports for the queue to decide.
    """

    def __init__(self, status: int, message: str, body: JSON | None = None, *,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.body = body or {}
        self.retry_after = retry_after
        """The server's Retry-After in seconds (capped), when it sent one."""

    @property
    def transient(self) -> bool:
        return self.status in TRANSIENT_STATUS


class ApiUnavailable(ApiError):  # noqa: N818 - named like Conflict, for what the caller sees
    """The API server could not be reached or did not answer (refused, reset, timed out): a 503."""

    def __init__(self, error: BaseException) -> None:
        if isinstance(error, aiohttp.ClientConnectorCertificateError):
            # TLS verification failed: said as such, with the fix, rather than as a server that is down.
            super().__init__(503, f"cannot reach the API server: its certificate is not trusted "
                                  f"({error.certificate_error}); check the kubeconfig's certificate-authority "
                                  "(-data) or the service account's ca.crt")
            return
        super().__init__(503, f"cannot reach the API server ({type(error).__name__}: {error})")


TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)
"""What the transport raises when there is no answer; it becomes an `ApiUnavailable`."""


class Conflict(ApiError):  # noqa: N818 - named for the HTTP status it represents
    """409 on update: somebody else wrote first; re-read and try again."""


class WriteFenced(Exception):  # noqa: N818 - it is a refusal, not a failure of the call
    """A write refused before it left the process: this replica no longer holds the Lease."""


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST tree."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        if subresource is not None:
            base += f"/{subresource}"
        return base


WORKFLOWS = Resource("towline.dev", "v1alpha1", "workflows")
WORKFLOW_RUNS = Resource("towline.dev", "v1alpha1", "workflowruns")
APPROVALS = Resource("towline.dev", "v1alpha1", "approvals")
STEP_TYPES = Resource("towline.dev", "v1alpha1", "steptypes")
CLUSTER_STEP_TYPES = Resource("towline.dev", "v1alpha1", "clustersteptypes", namespaced=False)
JOBS = Resource("batch", "v1", "jobs")
PODS = Resource("", "v1", "pods")
CONFIG_MAPS = Resource("", "v1", "configmaps")
EVENTS = Resource("", "v1", "events")
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies")
LEASES = Resource("coordination.k8s.io", "v1", "leases")


USER_AGENT = "towline"


class _Transport:
    """A connection pool to the API server (the connection's TLS context and client certificate) and the options
    every request takes.

    The session does not trust the environment: aiohttp then looked up ~/.netrc and the proxy variables on two
    worker threads for every request, a fifth of the operator's CPU per step (docs/benchmarks.md). The proxy
    the environment names for the API server is looked up once here instead; a kubeconfig's `proxy-url` wins.
    (A .netrc entry for the API server never applied: with the bearer token's header aiohttp refuses one.)
    """

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._session: aiohttp.ClientSession | None = None
        self.options: dict[str, Any] = {}

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connection = self.connection
            options: dict[str, Any] = {}
            if connection.proxy:
                options["proxy"] = connection.proxy
            else:
                with contextlib.suppress(LookupError):
                    options["proxy"], options["proxy_auth"] = get_env_proxy_for_url(URL(connection.server))
            if connection.server_name:
                options["server_hostname"] = connection.server_name
            self.options = options
            # As many connections as kubernetes-asyncio's pool allowed; watch events of large objects exceed
            # aiohttp's default read buffer (etcd's limit is 1.5 MiB).
            connector = aiohttp.TCPConnector(limit=100, ssl=connection.tls if connection.tls is not None else True)
            self._session = aiohttp.ClientSession(connector=connector, read_bufsize=2**21)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class KubeApi:
    """A thin JSON client over aiohttp: the connection's TLS, credential and proxy, nothing generated."""

    def __init__(self, connection: Connection, may_write: Callable[[str], bool] | None = None, *,
                 transport: _Transport | None = None, bearer: str | None = None) -> None:
        self._connection = connection
        self._may_write = may_write
        self._transport = transport or _Transport(connection)
        self._bearer = bearer

    @classmethod
    def without_credentials(cls, host: str, ca_file: str) -> KubeApi:
        """A connection to `host` trusting `ca_file` that carries no credential at all: the in-cluster web view's
        base, which only ever calls as a person (`as_bearer`). Anonymous calls on it are the API server's to
        refuse."""
        return cls(Connection(server=host.rstrip("/"), tls=tls_context(ca_file=ca_file)))

    def as_bearer(self, token: str) -> KubeApi:
        """The same connection pool, every call carrying `token` (a person's ID token) in place of the
        connection's credential. Meant for a `without_credentials` base: a client certificate of the
        connection's own would still be presented in its TLS handshake."""
        if not token:
            raise ValueError("as_bearer needs a token")
        return KubeApi(self._connection, self._may_write, transport=self._transport, bearer=token)

    def fenced(self, may_write: Callable[[str], bool]) -> KubeApi:
        """The same connection, refusing every write to a path while `may_write(path)` is false.

        Reconciles get this view: a replica that was paused past its Lease and
        resumes mid-pass cannot write, even before its elector notices.
        """
        return KubeApi(self._connection, may_write, transport=self._transport)

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> KubeApi:
        """In a pod: the mounted service account. Elsewhere: `kubeconfig` or $KUBECONFIG (and `context`), merged
        like kubectl merges $KUBECONFIG (a:b), first current-context winning."""
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if path is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls(in_cluster())
        return cls(await kubeconfig_loader.load(kubeconfig, context))

    def separate(self) -> KubeApi:
        """A second connection pool to the same server with the same credentials, for long-lived watches:
        held apart, they never take the slots the requests of passes need."""
        return KubeApi(self._connection, bearer=self._bearer)

    @property
    def server(self) -> str:
        """The API server's URL (https://HOST:PORT)."""
        return self._connection.server

    async def close(self) -> None:
        await self._transport.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        """One API call, never retried here: a transient failure is an ApiError the work queue retries."""
        resource = _resource_label(path)
        if method != "GET" and self._may_write is not None and not self._may_write(path):
            raise WriteFenced(f"{method} {path}: this replica does not hold the Lease (of its shard)")
        data = None if body is None else encode_body(body)
        try:
            with _latency(method, resource).time():
                response = await self.send(method, path, query=query, accept="application/json",
                                           content_type=content_type, data=data, timeout=REQUEST_TIMEOUT)
                status: int = response.status
                raw = await response.read()
        except TRANSPORT_ERRORS as error:
            # A restarting API server refuses connections for seconds: reported like a 503.
            _requests(method, resource, "unreachable").inc()
            raise ApiUnavailable(error) from error
        _requests(method, resource, str(status)).inc()
        payload = _json_answer(raw)
        if status < 400:
            if payload is None:
                raise ApiError(502, f"{method} {path}: the answer ({status}) is not JSON: {_excerpt(raw)}")
            return payload
        # An error body is the API server's Status, or plain text from what answered in front of it (an unknown
        # API group's "404 page not found", a proxy's page): either way the caller gets an ApiError with it.
        message = str((payload or {}).get("message") or _excerpt(raw))
        if status == 409:
            raise Conflict(status, message, payload)
        raise ApiError(status, message, payload, retry_after=_retry_after(response.headers.get("Retry-After")))

    async def send(
        self, method: str, path: str, *, query: Mapping[str, str] | None, accept: str,
        content_type: str | None = None, data: bytes | None = None, timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """The HTTP request itself, with the connection's credential as it stands for this request (a token
        file re-read once a minute, a credential plugin's token renewed once it expires). The caller holds the
        response and reads or releases it."""
        headers = {"User-Agent": USER_AGENT, "Accept": accept}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if self._bearer is not None:
            authorization: str | None = f"Bearer {self._bearer}"
        else:
            authorization = await self._connection.credential.authorization()
        if authorization:
            headers["Authorization"] = authorization
        url = self._connection.server + path
        if query:
            url += "?" + urlencode(list(query.items()))
        session = self._transport.session()
        response: aiohttp.ClientResponse = await session.request(
            method, url, headers=headers, data=data, timeout=timeout, **self._transport.options)
        return response

    async def read_text(self, path: str, *, query: Mapping[str, str] | None = None) -> str:
        """A GET whose answer is plain text (a pod's log); raises ApiError like `request`."""
        try:
            response = await self.send("GET", path, query=query, accept="*/*", timeout=REQUEST_TIMEOUT)
            raw: bytes = await response.read()
        except TRANSPORT_ERRORS as error:
            _requests("GET", _resource_label(path), "unreachable").inc()
            raise ApiUnavailable(error) from error
        _requests("GET", _resource_label(path), str(response.status)).inc()
        if response.status >= 400:
            try:
                message = str(json.loads(raw).get("message") or "")
            except ValueError:
                message = raw[:500].decode(errors="replace")
            raise ApiError(response.status, message)
        return raw.decode(errors="replace")

    async def get(self, path: str) -> JSON | None:
        try:
            return await self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def list(self, path: str, *, label_selector: str | None = None,
                   field_selector: str | None = None) -> list[JSON]:
        query = {key: value for key, value in (("labelSelector", label_selector),
                                               ("fieldSelector", field_selector)) if value}
        items: list[JSON] = (await self.request("GET", path, query=query or None)).get("items", [])
        return items

    async def create(self, path: str, body: JSON) -> tuple[JSON, bool]:
        """Create, or adopt what already exists under that name (409): creates are idempotent."""
        try:
            return await self.request("POST", path, body=body), True
        except Conflict:
            existing = await self.get(f"{path}/{body['metadata']['name']}")
            if existing is None:
                raise
            return existing, False

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        return await self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    async def replace(self, path: str, body: JSON) -> JSON:
        """PUT with the body's resourceVersion: raises Conflict when somebody wrote first."""
        return await self.request("PUT", path, body=body)

    async def delete(self, path: str, *, propagation: str = "Background") -> bool:
        """Delete; True if it existed. Children go with it (background propagation)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            await self.request("DELETE", path, body=body)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True


def _json_answer(raw: bytes) -> JSON | None:
    """The answer's JSON object ({} for an empty body), or None when it is not one."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _excerpt(raw: bytes) -> str:
    return " ".join(raw[:500].decode(errors="replace").split())


def encode_body(body: Any) -> bytes:
    """A request body as JSON bytes. Bodies are plain JSON values; a date or datetime is written as
    kubernetes-asyncio's serializer wrote it (isoformat)."""
    return json.dumps(body, separators=(",", ":"), default=_iso_date).encode()


def _iso_date(value: Any) -> str:
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _resource_label(path: str) -> str:
    """`jobs`, `workflowruns/status`, ...: a low-cardinality label for metrics."""
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts:
        index = parts.index("namespaces")
        rest = parts[index + 2:]
    else:
        rest = parts[3:] if parts[:1] == ["apis"] else parts[2:]
    if not rest:
        return "namespaces"
    label = rest[0]
    if len(rest) >= 3:
        label += "/" + rest[2]
    return label


def _retry_after(header: str | None) -> float | None:
    """Retry-After in seconds (the API server sends whole seconds), capped."""
    if header is None or not header.isdigit():
        return None
    return min(float(header), MAX_API_RETRY_AFTER_SECONDS)
