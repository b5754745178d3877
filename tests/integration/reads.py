"""Reading objects from the API server in the test process: one HTTPS GET, no kubectl process.

The waits of the integration tests poll (`support.wait_for`) several times a second. Through
kubectl every poll was a process (about 50 ms of CPU, plus its discovery requests), and the
concurrent part spent a seventh of the machine's two cores on them (docs/benchmarks-history.md, "Where
the suite's CPU goes"). Here a poll is a GET on a kept resource path, as the cluster's admin
(`ControlPlane.api_get`: its bearer token; on an existing cluster `kubectl get --raw`).

Names resolve as kubectl resolves them: plural, singular, kind or short name, each also
qualified by its group (`workflowruns.towline.dev`), from the server's own discovery, read once
per cluster and again when a name is not (yet) known, e.g. a CRD installed since.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from towline_dev.controlplane import ControlPlane

READ_TIMEOUT = 30.0
"""Seconds one GET may take: a loaded API server answers late, not wrongly."""
TOO_MANY_REQUESTS_TRIES = 10
"""How often a GET answered 429 is sent again (client-go's, and so kubectl's, limit)."""


@dataclass(frozen=True)
class Resource:
    """Where a resource's objects are: `/apis/GROUP/VERSION` (or `/api/v1`) and its plural name."""

    base: str
    plural: str
    namespaced: bool
    api_version: str
    kind: str

    def path(self, namespace: str | None, name: str = "") -> str:
        where = f"/namespaces/{urllib.parse.quote(namespace)}" if self.namespaced and namespace else ""
        return f"{self.base}{where}/{self.plural}" + (f"/{urllib.parse.quote(name)}" if name else "")


class ReadError(RuntimeError):
    """The API server refused a read a test expected to succeed (the message has its answer)."""


_known: dict[str, dict[str, Resource]] = {}
_lock = threading.Lock()


def until_not_throttled(send: Callable[[], tuple[int, bytes]]) -> tuple[int, bytes]:
    """`send`'s answer, the request sent again while the server answers 429 (e.g. "storage is (re)initializing"
    right after a CRD is established), after the seconds it asks for, as client-go does for kubectl."""
    for _ in range(TOO_MANY_REQUESTS_TRIES):
        status, body = send()
        if status != 429:
            break
        try:
            retry_after = float(json.loads(body).get("details", {}).get("retryAfterSeconds") or 1)
        except ValueError:
            retry_after = 1.0
        time.sleep(min(retry_after, 10.0))  # the server's own signal of when to ask again
    return status, body


def _get(cluster: ControlPlane, path: str) -> tuple[int, bytes]:
    """One GET, sent again while the server is busy (until_not_throttled)."""
    return until_not_throttled(lambda: cluster.api_get(path, timeout=READ_TIMEOUT))


def _fetch(cluster: ControlPlane, path: str) -> dict[str, Any]:
    status, body = _get(cluster, path)
    if status != 200:
        raise ReadError(f"GET {path}: {status} {body[:500].decode(errors='replace')}")
    document: dict[str, Any] = json.loads(body)
    return document


def _discover(cluster: ControlPlane) -> dict[str, Resource]:
    """Every name of every top-level resource the server serves, in its preferred version."""
    group_versions = [("/api/v1", "v1", "")]
    for group in _fetch(cluster, "/apis").get("groups", []):
        version = group["preferredVersion"]["groupVersion"]
        group_versions.append((f"/apis/{version}", version, group["name"]))
    names: dict[str, Resource] = {}
    for base, api_version, group in group_versions:
        for entry in _fetch(cluster, base).get("resources", []):
            if "/" in entry["name"]:
                continue  # a subresource (status, scale, log, ...)
            resource = Resource(base=base, plural=entry["name"], namespaced=entry["namespaced"],
                                api_version=api_version, kind=entry["kind"])
            for name in {entry["name"], entry.get("singularName") or "", entry["kind"].lower(),
                         *entry.get("shortNames", [])} - {""}:
                names.setdefault(name, resource)
                if group:
                    names.setdefault(f"{name}.{group}", resource)
    return names


def resource(cluster: ControlPlane, kind: str) -> Resource:
    """The resource `kind` names on `cluster` (as `kubectl get KIND` would take it)."""
    key, wanted = cluster.server, kind.lower()
    with _lock:
        found = _known.get(key, {}).get(wanted)
        if found is None:
            _known[key] = _discover(cluster)
            found = _known[key].get(wanted)
    if found is None:
        raise ReadError(f"the API server at {key} serves no resource named {kind!r}")
    return found


def read_object(cluster: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    """The object, or None when it does not exist or the server cannot be reached now (a poll tries again)."""
    try:
        status, body = _get(cluster, resource(cluster, kind).path(namespace, name))
    except (OSError, ReadError):
        return None  # the API server is restarting or not answering: as `kubectl get` failing did
    if status != 200:
        return None
    return _as_kubectl_shows(json.loads(body))


def read_list(cluster: ControlPlane, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
    """The namespace's objects of `kind` (matching the label `selector`) as `kubectl get -o json` shows them:
    each with its kind and apiVersion (a list from the API server leaves them out of its items)."""
    found = resource(cluster, kind)
    query = f"?{urllib.parse.urlencode({'labelSelector': selector})}" if selector else ""
    items: list[dict[str, Any]] = _fetch(cluster, found.path(namespace) + query).get("items") or []
    return [_as_kubectl_shows({"apiVersion": found.api_version, "kind": found.kind, **item}) for item in items]


def _as_kubectl_shows(document: dict[str, Any]) -> dict[str, Any]:
    """Without metadata.managedFields, which `kubectl get` leaves out unless asked (--show-managed-fields)."""
    document.get("metadata", {}).pop("managedFields", None)
    return document
