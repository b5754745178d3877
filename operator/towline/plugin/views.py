"""The read-only commands: `runs`, `status`, `describe` and `version`, in every `-o` format.

API calls go through towline.k8s.session as the current user; text comes from
render/describe/output, which draw the run's display model (runtree). Each returns
its exit code and writes through the Io.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import metadata

from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import ApiError, KubeApi
from towline.plugin import describe as describing
from towline.plugin import output, render
from towline.plugin.commands import Io, run_or_fail
from towline.plugin.filters import RunFilter
from towline.plugin.runtree import run_tree

RUN_KIND = {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun"}
APPROVAL_KIND = {"apiVersion": "towline.dev/v1alpha1", "kind": "Approval"}
EVENT_KIND = {"apiVersion": "v1", "kind": "Event"}


def typed(items: list[JSON], kind: JSON) -> list[JSON]:
    """List answers omit each item's kind; `-o json|yaml|name` print it, as kubectl does."""
    return [{**kind, **item} for item in items]


async def list_runs(api: KubeApi, namespace: str | None, io: Io, *, selector: str | None, narrow: RunFilter,
                    form: str | None) -> int:
    """`runs`: one namespace, or all (`namespace=None`, with a NAMESPACE column)."""
    now = datetime.now(UTC)
    runs = narrow.apply(await session.list_runs(api, namespace, selector=selector), now)
    if form in output.MACHINE_FORMATS:
        if runs or form != "name":
            io.out(output.objects(typed(runs, RUN_KIND), form))
        return 0
    io.out(render.runs_table(runs, now, wide=form == "wide", all_namespaces=namespace is None))
    return 0


async def status(api: KubeApi, namespace: str, io: Io, name: str, form: str | None) -> int:
    run = {**RUN_KIND, **await run_or_fail(api, namespace, name)}
    if form in output.MACHINE_FORMATS:
        io.out(output.objects([run], form, single=True))
        return 0
    io.out(render.status_tree(run_tree(run), datetime.now(UTC), wide=form == "wide"))
    return 0


async def describe(api: KubeApi, namespace: str, io: Io, name: str, form: str | None) -> int:
    """The run, its Approvals and its Events; `-o json|yaml` prints the three kinds as one List."""
    run = {**RUN_KIND, **await run_or_fail(api, namespace, name)}
    approvals = typed(await session.approvals_of_run(api, namespace, name), APPROVAL_KIND)
    notes: list[str] = []
    try:
        events = typed(await session.events_of(api, namespace, "WorkflowRun", name), EVENT_KIND)
    except ApiError as error:
        if error.status != 403:
            raise
        events = []
        notes.append("note: you may not list Events in this namespace; the run's Events are not shown")
    if form in output.MACHINE_FORMATS:
        io.out(output.objects([run, *approvals, *events], form))
    else:
        io.out(describing.describe(run_tree(run), approvals, events, datetime.now(UTC)))
    for note in notes:
        io.err(note)
    return 0


def plugin_version() -> str:
    try:
        return metadata.version("towline")
    except metadata.PackageNotFoundError:
        return "unknown (not installed as a package)"


async def version(connect: Callable[[], Awaitable[KubeApi]], io: Io) -> int:
    """The plugin's version; then, if the cluster answers, its Kubernetes version and Towline's images.

    Exits 0 when the client part printed, whatever the server part says: the command is
    how a person tells which plugin they run, also while the cluster is down.
    """
    io.out(f"Client (kubectl-towline): {plugin_version()}")
    try:
        api = await connect()
    except Exception as error:  # any reason not to reach it is only reported
        io.out(f"Server: not reachable ({' '.join(str(error).split())})")
        return 0
    try:
        try:
            info = await session.server_version(api)
        except ApiError as error:
            io.out(f"Server: not reachable ({error.message})")
            return 0
        io.out(f"Kubernetes: {info.get('gitVersion', '?')} ({info.get('platform', '?')})")
        try:
            deployments = await session.towline_deployments(api)
        except ApiError as error:
            io.out(f"Towline: not visible to you ({error.status}: you may not list Deployments cluster-wide)")
            return 0
        if not deployments:
            io.out("Towline: no Deployment labelled app.kubernetes.io/name=towline found")
        for deployment in sorted(deployments, key=lambda d: (d["metadata"].get("namespace", ""),
                                                             d["metadata"]["name"])):
            meta = deployment["metadata"]
            labels = meta.get("labels") or {}
            images = ", ".join(c.get("image", "?") for c in
                               (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {})
                               .get("containers") or [])
            version_label = labels.get("app.kubernetes.io/version")
            io.out(f"Towline {labels.get('app.kubernetes.io/component', 'component')}: {meta.get('namespace')}/"
                   f"{meta['name']} {images}" + (f" (chart app version {version_label})" if version_label else ""))
        return 0
    finally:
        await api.close()
