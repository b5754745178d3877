"""`kubectl towline history`, `export --archive` and `verify --archive`: the archive, read through the API server.

The archive serves `archive.towline.dev/v1alpha1` as an aggregated API: the API server authenticates the person
(however kubectl does), and the archive answers only what Kubernetes RBAC lets them read: runs where they may
list WorkflowRuns, logs and exports where they may also read pods' logs. Nothing here holds a right of its own.
"""

from __future__ import annotations

from datetime import UTC, datetime

from towline.jsontypes import JSON
from towline.k8s.client import ApiError, KubeApi
from towline.plugin import output, render
from towline.plugin.archived import report
from towline.plugin.commands import Io, NotFound

BASE = "/apis/archive.towline.dev/v1alpha1"
ARCHIVE_OFF = ("the cluster serves no archive (archive.towline.dev): install the chart with archive.enabled=true "
               "(docs/archive.md)")


def runs_path(namespace: str | None) -> str:
    return f"{BASE}/archivedruns" if namespace is None else f"{BASE}/namespaces/{namespace}/archivedruns"


def export_path(namespace: str) -> str:
    return f"{BASE}/namespaces/{namespace}/archivechains/chain/export"


GROUP_NOT_SERVED = "the server could not find the requested resource"
"""The API server's words for a path of a group nobody serves; the archive's own 404s name what is missing."""


def _explained(error: ApiError) -> str:
    if error.status == 404 and GROUP_NOT_SERVED in error.message:
        return ARCHIVE_OFF
    return error.message


async def history(api: KubeApi, namespace: str | None, io: Io, *, filters: dict[str, str | None], limit: int,
                  continue_token: str | None, form: str | None) -> int:
    """Archived runs, newest first, one page; the next page's `--continue` token is said on stderr."""
    query = {key: value for key, value in filters.items() if value}
    query["limit"] = str(limit)
    if continue_token:
        query["continue"] = continue_token
    try:
        answer = await api.request("GET", runs_path(namespace), query=query)
    except ApiError as error:
        io.err(f"error: {_explained(error)}")
        return 1
    items: list[JSON] = answer.get("items") or []
    if form in output.MACHINE_FORMATS:
        if items or form != "name":
            io.out(output.objects(items, form))
    else:
        io.out(history_table(items, wide=form == "wide", all_namespaces=namespace is None))
    following = (answer.get("metadata") or {}).get("continue")
    if following:
        io.err(f"more: kubectl towline history --continue {following}")
    return 0


def history_table(items: list[JSON], *, wide: bool, all_namespaces: bool) -> str:
    now = datetime.now(UTC)
    header = [*(["NAMESPACE"] if all_namespaces else []), "NAME", "WORKFLOW", "PHASE", "REQUESTER", "APPROVERS",
              "STARTED", *(["DURATION", "UID"] if wide else [])]
    rows = []
    for item in items:
        meta = item.get("metadata") or {}
        rows.append([*([str(meta.get("namespace", ""))] if all_namespaces else []), str(meta.get("name", "")),
                     str(item.get("workflow", "")), str(item.get("phase", "")), str(item.get("requester") or "-"),
                     ",".join(item.get("approvers") or []) or "-", str(item.get("startedAt") or "-"),
                     *([render.duration(item.get("startedAt"), item.get("finishedAt"), now),
                        str(meta.get("uid", ""))] if wide else [])])
    return render.table(header, rows) if rows else "No archived runs found."


async def archived_run(api: KubeApi, namespace: str, io: Io, name: str, form: str | None) -> int:
    """`get RUN --archived`: the run as the archive holds it."""
    try:
        answer = await api.request("GET", f"{runs_path(namespace)}/{name}")
    except ApiError as error:
        io.err(f"error: {_explained(error)}")
        return 1
    io.out(output.objects([answer], form or "yaml", single=True))
    return 0


async def archived_log(api: KubeApi, namespace: str, run: str, step: str | None) -> str:
    """The archived log of a run's step (all steps with None); raises ApiError as the API server answered."""
    return await api.read_text(f"{runs_path(namespace)}/{run}/log", query={"step": step} if step else None)


async def archived_logs(api: KubeApi, namespace: str, io: Io, run: str, step: str | None, *,
                        run_exists: bool = True) -> int:
    """`logs RUN [STEP]` once the run or its pods are gone: the archive's copy, said to be one."""
    try:
        text = await archived_log(api, namespace, run, step)
    except ApiError as error:
        if not run_exists:
            raise NotFound(f"no WorkflowRun {run!r} in namespace {namespace}, and none in the archive "
                           f"({_explained(error)}); list them with `kubectl towline runs` or "
                           "`kubectl towline history`") from error
        what = f"step {step} of run {run}" if step else f"run {run}"
        io.err(f"no step pods for {what} in the cluster, and the archive has none either ({_explained(error)}); "
               f"`kubectl towline status {run}` shows where it stands")
        return 1
    io.out(f"(from the archive: the run or its step pods are gone from the cluster)\n{text.rstrip(chr(10))}")
    return 0


async def export_archive(api: KubeApi, namespace: str, io: Io, since: str | None) -> int:
    """The namespace's record as JSON lines on stdout: what `kubectl towline verify FILE --key PEM` checks."""
    try:
        text = await api.read_text(export_path(namespace), query={"since": since} if since else None)
    except ApiError as error:
        io.err(f"error: {_explained(error)}")
        return 1
    io.out(text.rstrip("\n"))
    return 0


async def verify_archive(api: KubeApi, namespace: str, io: Io, key_pem: bytes) -> int:
    """A live namespace's chain, exported through the API server and checked here with the public key: the archive
    is not trusted to say its own record is whole."""
    from towline.archive.chain import load_public_key  # noqa: PLC0415 - command-only import
    from towline.archive.exports import verify_export  # noqa: PLC0415

    try:
        text = await api.read_text(export_path(namespace))
    except ApiError as error:
        io.err(f"error: {_explained(error)}")
        return 1
    return report(verify_export(text.splitlines(keepends=True), load_public_key(key_pem)), io.out, io.err)
