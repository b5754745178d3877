"""The archive's read API as Kubernetes clients see it: discovery, ArchivedRun objects, Tables, Status errors,
and the list query read from a request's parameters.

Pure: no I/O, no clock reads (`now` is an argument). What a client sends is hostile input: a bad parameter is an
`ApiProblem` naming it and the fix, answered as a 400 Status, never an exception out of a handler.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from towline.archive.records import ArchivedRun, Entry, HistoryQuery
from towline.jsontypes import JSON
from towline_connectors.wire import parse_rfc3339, rfc3339

GROUP = "archive.towline.dev"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
RESOURCE = "archivedruns"
KIND = "ArchivedRun"
LOG_SUBRESOURCE = "log"
CHAIN_RESOURCE = "archivechains"
"""A namespace's record as one object, `chain`; its `export` subresource is the file `kubectl towline verify`
checks."""
CHAIN_NAME = "chain"
EXPORT_SUBRESOURCE = "export"

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
"""kubectl asks for 500 a page (`--chunk-size`); more is refused rather than silently cut."""



class ApiProblem(Exception):  # noqa: N818 - it is an answer to the client, not a failure of the server
    """A request the archive answers with a Status: `code` (400, 403, 404 ...), `reason` and a message that names
    what to fix."""

    def __init__(self, code: int, reason: str, message: str, *, details: JSON | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def status(code: int, reason: str, message: str, details: JSON | None = None) -> JSON:
    """A metav1 Status, as kubectl prints it (`Error from server (Forbidden): <message>`)."""
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def forbidden(user: str, verb: str, resource: str, namespace: str, *, needs: str) -> ApiProblem:
    """403 naming the right that is missing (`needs`), as the API server words its own refusals."""
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return ApiProblem(403, "Forbidden", f'{resource} is forbidden: User "{user}" cannot {verb} resource '
                                        f'"{resource}" in API group "{GROUP}" {where}: {needs}',
                      details={"group": GROUP, "kind": RESOURCE})


def not_found(name: str, namespace: str) -> ApiProblem:
    return ApiProblem(404, "NotFound", f'{RESOURCE}.{GROUP} "{name}" not found in the archive of namespace '
                                       f'"{namespace}"', details={"name": name, "group": GROUP, "kind": RESOURCE})


# -- discovery ------------------------------------------------------------------------------------------------


def api_group() -> JSON:
    preferred = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [preferred],
            "preferredVersion": preferred}


def api_group_list() -> JSON:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group()]}


def api_resource_list() -> JSON:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION, "resources": [
        {"name": RESOURCE, "singularName": "archivedrun", "namespaced": True, "kind": KIND,
         "verbs": ["get", "list"], "shortNames": ["arun"], "categories": ["towline"]},
        {"name": f"{RESOURCE}/{LOG_SUBRESOURCE}", "singularName": "", "namespaced": True, "kind": KIND,
         "verbs": ["get"]},
        {"name": f"{CHAIN_RESOURCE}/{EXPORT_SUBRESOURCE}", "singularName": "", "namespaced": True,
         "kind": "ArchiveChain", "verbs": ["get"]},
    ]}


# -- the list query -------------------------------------------------------------------------------------------


def since_of(params: Mapping[str, str]) -> datetime | None:
    """An export's `since` (RFC 3339): it starts at the last checkpoint before then, so it verifies on its own."""
    return _time_param(params, "since")


def history_query(namespace: str, params: Mapping[str, str]) -> HistoryQuery:
    """The filters of a list request: `workflow`, `requester`, `approver`, `phase`, `since`, `until` (RFC 3339),
    `labelSelector` (equality only), `limit`, `continue`."""
    if params.get("watch") in ("true", "1"):
        raise ApiProblem(405, "MethodNotAllowed", "the archive does not serve watch: archived runs never change; "
                                                  "list them again (kubectl get archivedruns without -w)")
    if params.get("fieldSelector"):
        raise ApiProblem(400, "BadRequest", "fieldSelector is not supported by the archive: filter with the "
                                            "parameters workflow, requester, approver, phase, since and until")
    return HistoryQuery(
        namespace=namespace,
        workflow=params.get("workflow") or None,
        requester=params.get("requester") or None,
        approver=params.get("approver") or None,
        phase=params.get("phase") or None,
        started_from=_time_param(params, "since"),
        started_before=_time_param(params, "until"),
        labels=label_equalities(params.get("labelSelector") or ""),
        limit=_limit(params.get("limit")),
        continue_token=params.get("continue") or None,
    )


def label_equalities(selector: str) -> dict[str, str]:
    """`a=b,c==d` as {a: b, c: d}; any other operator is refused by name."""
    labels: dict[str, str] = {}
    for term in filter(None, (part.strip() for part in selector.split(","))):
        if "!=" in term or "=" not in term:
            raise ApiProblem(400, "BadRequest", f"labelSelector {term!r}: the archive filters on label equality "
                                                "only (key=value, comma-separated)")
        key, _, value = term.replace("==", "=", 1).partition("=")
        if not key.strip() or "=" in value:
            raise ApiProblem(400, "BadRequest", f"labelSelector {term!r}: write key=value")
        labels[key.strip()] = value.strip()
    return labels


def _time_param(params: Mapping[str, str], name: str) -> datetime | None:
    text = params.get(name)
    if not text:
        return None
    try:
        moment = parse_rfc3339(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ApiProblem(400, "BadRequest", f"{name}={text!r} is not an RFC 3339 time with a zone; write e.g. "
                                            f"{name}=2025-07-01T00:00:00Z")
    return moment.astimezone(UTC)


def _limit(text: str | None) -> int:
    if not text:
        return DEFAULT_LIMIT
    if not text.isdigit() or not 0 < int(text) <= MAX_LIMIT:
        raise ApiProblem(400, "BadRequest", f"limit={text!r} must be a whole number from 1 to {MAX_LIMIT}")
    return int(text)


# -- across namespaces: one continue token over the namespaces' own ----------------------------------------


def encode_all_continue(namespace: str, inner: str | None) -> str:
    raw = json.dumps({"ns": namespace, "c": inner}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_all_continue(token: str) -> tuple[str, str | None]:
    """(namespace to go on from, that namespace's own continue token or None to start it)."""
    try:
        value = json.loads(base64.urlsafe_b64decode(token.encode()))
        namespace, inner = value["ns"], value["c"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        namespace = inner = None
    if not isinstance(namespace, str) or not (inner is None or isinstance(inner, str)):
        raise ApiProblem(400, "BadRequest", "continue: the token is not one this archive gave; list again without it")
    return namespace, inner


# -- objects --------------------------------------------------------------------------------------------------


def _rfc3339(moment: datetime | None) -> str | None:
    """A metav1.Time: whole seconds, as the API server writes a WorkflowRun's times."""
    return None if moment is None else rfc3339(moment, timespec="seconds")


def approvers(run: ArchivedRun) -> list[str]:
    """Who decided the run's approvals, as its record keeps them."""
    kept: Any = run.entry.body.get("approvals")
    names: set[str] = set()
    for approval in kept if isinstance(kept, list) else ():
        spec = approval.get("spec") if isinstance(approval, dict) else None
        if isinstance(spec, dict) and spec.get("decidedBy"):
            names.add(str(spec["decidedBy"]))
    return sorted(names)


def _labels(run: ArchivedRun) -> dict[str, str]:
    kept = run.entry.body.get("run")
    meta = kept.get("metadata") if isinstance(kept, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def archived_run(run: ArchivedRun) -> JSON:
    """An archived run as an API object: who, what, when, where it sits in its namespace's chain, and the record
    itself (`record`: the run, its approvals and its logs' digests, exactly as archived)."""
    entry = run.entry
    return {
        "apiVersion": GROUP_VERSION, "kind": KIND,
        "metadata": {"name": run.name, "namespace": entry.namespace, "uid": run.uid,
                     "creationTimestamp": _rfc3339(run.started_at), "labels": _labels(run)},
        "workflow": run.workflow, "phase": run.phase, "requester": run.requester, "approvers": approvers(run),
        "startedAt": _rfc3339(run.started_at), "finishedAt": _rfc3339(run.finished_at),
        "chain": {"seq": entry.seq, "digest": entry.digest, "prevDigest": entry.prev_digest,
                  "recordedAt": entry.recorded_at},
        "record": entry.body,
    }


def archived_run_list(runs: Sequence[ArchivedRun], continue_token: str | None) -> JSON:
    metadata: JSON = {"continue": continue_token} if continue_token else {}
    return {"apiVersion": GROUP_VERSION, "kind": f"{KIND}List", "metadata": metadata,
            "items": [archived_run(run) for run in runs]}


COLUMNS: tuple[tuple[str, str, str, int], ...] = (
    ("Name", "string", "The run's name.", 0),
    ("Workflow", "string", "The Workflow the run ran.", 0),
    ("Phase", "string", "How the run ended.", 0),
    ("Requester", "string", "Who asked for the run.", 0),
    ("Approvers", "string", "Who decided its approvals.", 0),
    ("Started", "string", "When the run started (UTC).", 0),
    ("Duration", "string", "From start to end.", 1),
    ("UID", "string", "The run's UID.", 1),
    ("Digest", "string", "The run record's digest in the namespace's chain.", 1),
)


def _duration(run: ArchivedRun) -> str:
    if run.finished_at is None:
        return "<none>"
    seconds = max(int((run.finished_at - run.started_at).total_seconds()), 0)
    return f"{seconds // 3600}h{seconds // 60 % 60}m{seconds % 60}s" if seconds >= 3600 else (
        f"{seconds // 60}m{seconds % 60}s" if seconds >= 60 else f"{seconds}s")


def table(runs: Sequence[ArchivedRun], continue_token: str | None) -> JSON:
    """A meta.k8s.io/v1 Table: what `kubectl get archivedruns` prints (`-o wide` adds the priority-1 columns)."""
    rows = [{
        "cells": [run.name, run.workflow, run.phase, run.requester, ",".join(approvers(run)) or "<none>",
                  _rfc3339(run.started_at), _duration(run), run.uid, run.entry.digest[:12]],
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": archived_run(run)["metadata"]},
    } for run in runs]
    metadata: JSON = {"continue": continue_token} if continue_token else {}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
            "columnDefinitions": [{"name": name, "type": kind, "format": "name" if name == "Name" else "",
                                   "description": description, "priority": priority}
                                  for name, kind, description, priority in COLUMNS],
            "rows": rows}


def wants_table(accept: str) -> bool:
    """kubectl asks `application/json;as=Table;v=v1;g=meta.k8s.io, ..., application/json`: the first type this
    server can answer wins (only Table v1; v1beta1 is gone from the API server as well)."""
    for offer in accept.split(","):
        fields = dict(p.strip().partition("=")[::2] for p in offer.split(";")[1:])
        if fields.get("as") == "Table" and fields.get("v") == "v1" and fields.get("g") == "meta.k8s.io":
            return True
        if offer.split(";")[0].strip() in ("application/json", "*/*", "application/*") and "as" not in fields:
            return False
    return False


def log_text(entries: Sequence[Entry], step: str | None) -> str:
    """The archived log of a step (or of every step), in the order it ran; each container's log under a header
    when there are several, and a note where a log was cut at the archive's cap."""
    parts = []
    for entry in entries:
        body = entry.body
        text = str(body.get("text") or "")
        if len(entries) > 1 or step is None:
            header = f"==> step {body.get('step')}, attempt {body.get('attempt')}, container {body.get('container')}"
            parts.append(f"{header} <==\n")
        parts.append(text if not text or text.endswith("\n") else text + "\n")
        if body.get("truncated") is True:
            kept = len(text.encode())
            parts.append(f"[the archive kept the first {kept} of {body.get('bytes')} bytes of this log]\n")
    return "".join(parts)
