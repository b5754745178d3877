"""What each `kubectl towline` command does against the API server, as the current user.

API calls go through towline.k8s.session; text comes from render/graph. Every
command returns its exit code and writes through `out` / `err`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import yaml

from towline.api.runterms import TERMINAL_RUN_PHASES
from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import ApiError, KubeApi
from towline.k8s.owners import controlling_job
from towline.k8s.steptypes import list_step_types
from towline.plugin import approvalrule, follow, graph, manifests, output, runactions, submitting
from towline.plugin.runtree import run_tree, step_nodes

TERMINAL = TERMINAL_RUN_PHASES
_DONE = {"cancel": "cancelled", "stop": "stopped (no finally steps)", "suspend": "suspended", "resume": "resumed"}


@dataclass
class Io:
    out: Callable[[str], None]
    err: Callable[[str], None]


class NotFound(Exception):  # noqa: N818 - says what the user sees
    pass


async def run_or_fail(api: KubeApi, namespace: str, name: str) -> JSON:
    run = await session.get_run(api, namespace, name)
    if run is None:
        raise NotFound(f"no WorkflowRun {name!r} in namespace {namespace}; list them with `kubectl towline runs`")
    return run


async def start(
    api: KubeApi, namespace: str, io: Io, *, workflow: str, params: JSON, follow: bool, wait: bool = False,
    form: str | None = None, name: str | None = None, labels: dict[str, str] | None = None,
    dry_run: str | None = None,
) -> int:
    """Create a run as the caller; `follow` prints its progress, `wait` only its end (`form`: the run as
    JSON/YAML, or its name), else `form` prints the created run. `dry_run`: client (print what it would
    send) or server (admission judges it, nothing is stored)."""
    if await session.get_workflow(api, namespace, workflow) is None:
        raise NotFound(f"no Workflow {workflow!r} in namespace {namespace}")
    user = await session.who_am_i(api)
    body = submitting.named(manifests.run_manifest(workflow, params, user), name, labels or {})
    said = Io(out=io.err if form and wait else io.out, err=io.err)  # with --wait -o, stdout is the end's alone
    run = await submitting.create(api, namespace, said, body, dry_run=dry_run, form=None if wait or follow else form,
                                  note=f" (requested by {user})")
    created = run["metadata"]["name"]
    if follow:
        return await follow_run(api, namespace, io, created)
    return await wait_for_run(api, namespace, io, created, form) if wait else 0


async def wait_for_run(api: KubeApi, namespace: str, io: Io, name: str, form: str | None) -> int:
    """Wait until the run ends, then print it (`form`) or its phase, message and outputs; 0 only if it succeeded."""
    run = await follow.run_until_it_ends(api, namespace, name, io.err)
    if run is None:
        return 1
    status = run.get("status") or {}
    if form == "name":
        io.out(f"workflowrun/{name}")
    elif form:
        io.out(output.dump(run, form))
    else:
        message = f": {status['message']}" if status.get("message") else ""
        io.out(f"workflowrun/{name} {status.get('phase')}{message}")
        for key, value in sorted((status.get("outputs") or {}).items()):
            io.out(f"  {key}: {json.dumps(value, ensure_ascii=False, sort_keys=True)}")
    return 0 if status.get("phase") == "Succeeded" else 1


async def follow_run(api: KubeApi, namespace: str, io: Io, name: str) -> int:
    """Print every change of phase or current step until the run ends (a watch); exit 0 only if it succeeded."""
    return await follow.watch_run(api, namespace, name, io.out, io.err)


async def decide(api: KubeApi, namespace: str, io: Io, *, approval: str, decision: str, reason: str | None) -> int:
    if await session.get_approval(api, namespace, approval) is None:
        raise NotFound(f"no Approval {approval!r} in namespace {namespace}; `kubectl towline status RUN` names it")
    user = await session.who_am_i(api)
    await session.decide_approval(api, namespace, approval, approvalrule.decision_patch(user, decision, reason))
    io.out(f"approval/{approval} {decision.lower()} by {user}")
    return 0


async def switch(api: KubeApi, namespace: str, io: Io, name: str, action: runactions.Switch) -> int:
    """cancel, stop, suspend or resume: the user's switches on a run."""
    await runactions.switch(api, namespace, await run_or_fail(api, namespace, name), action)
    io.out(f"workflowrun/{name} {_DONE[action]}")
    return 0


async def retry(api: KubeApi, namespace: str, io: Io, name: str, follow: bool, *, workflow_changed: bool = False,
                params: JSON | None = None) -> int:
    old = await run_or_fail(api, namespace, name)
    run, reused = await runactions.retry(api, namespace, old, await session.who_am_i(api),
                                         workflow_changed=workflow_changed, params=params)
    new = run["metadata"]["name"]
    under = " under the Workflow as it is now" if workflow_changed else ""
    io.out(f"workflowrun/{new} created: retry of {name}{under}, reusing {', '.join(reused) or 'no steps'}")
    return await follow_run(api, namespace, io, new) if follow else 0


async def resubmit(api: KubeApi, namespace: str, io: Io, name: str, *, follow: bool, dry_run: str | None,
                   form: str | None) -> int:
    """A new run of RUN's Workflow with RUN's params, requested by the caller (never RUN's requester)."""
    old = await run_or_fail(api, namespace, name)
    user = await session.who_am_i(api)
    run = await submitting.create(api, namespace, io, submitting.resubmit_manifest(old, user), dry_run=dry_run,
                                  form=form, note=f": resubmit of {name} (requested by {user})")
    return await follow_run(api, namespace, io, run["metadata"]["name"]) if follow and not dry_run else 0


async def submit(api: KubeApi, namespace: str, io: Io, documents: list[JSON], *, dry_run: str | None,
                 form: str | None) -> int:
    """`submit -f FILE...`: each WorkflowRun of the files, created as the caller (all checked before the first)."""
    user = await session.who_am_i(api)
    checked = [submitting.as_caller(document, user, f"document {index}")
               for index, document in enumerate(documents, 1)]
    for body in checked:
        await submitting.create(api, namespace, io, body, dry_run=dry_run, form=form, note=f" (requested by {user})")
    return 0


async def logs(api: KubeApi, namespace: str, io: Io, name: str, step: str | None, *,
               query: dict[str, str] | None = None) -> int:
    run = await run_or_fail(api, namespace, name)
    pods = runs_own_pods(run, await session.step_pods(api, namespace, name, step))
    if not pods:
        what = f"step {step} of run {name}" if step else f"run {name}"
        io.err(f"no step pods for {what} (yet); `kubectl towline status {name}` shows where it stands")
        return 1
    missing = 0
    for pod in pods:
        pod_name = pod["metadata"]["name"]
        labels = pod["metadata"].get("labels") or {}
        header = f"step {labels.get('towline.dev/step', '?')} attempt {labels.get('towline.dev/attempt', '?')}"
        wanted = (query or {}).get("container")
        if wanted and wanted not in {c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or []}:
            missing += 1
            io.err(f"{header} (pod {pod_name}) has no {wanted} container: only a step type's pod has one; "
                   "drop -c to read the step's own container")
            continue
        io.out(f"==> {header} (pod {pod_name}) <==")
        try:
            io.out((await session.pod_log(api, namespace, pod_name, query)).rstrip("\n"))
        except ApiError as error:
            missing += 1
            io.err(f"logs of pod {pod_name} are not available from the API server ({error.status}: "
                   f"{error.message}). The node that ran it does not serve logs, or the pod is gone. "
                   f"The step's result is in `kubectl towline status {name}`.")
    return 1 if missing == len(pods) else 0


def runs_own_pods(run: JSON, pods: list[JSON]) -> list[JSON]:
    """The pods whose controlling Job is one the run's status names (only the operator writes status).

    The run label proves nothing: a Job somebody else made with that label on its pod template gets
    labelled pods from the Job controller, and their logs must never pass for the run's.
    """
    names = follow.step_jobs(run)
    return [pod for pod in pods if (job := controlling_job(pod)) is not None and job.name in names]


async def draw(api: KubeApi, namespace: str, io: Io, *, name: str, kind: str, form: str) -> int:
    """`graph WORKFLOW|RUN`: a run if one has that name, else the workflow."""
    run = None if kind == "workflow" else await session.get_run(api, namespace, name)
    if run is not None:
        if (run.get("status") or {}).get("workflowSpec") is None:
            raise NotFound(f"run {name} has not started yet (no status.workflowSpec); try again in a moment")
        drawn = graph.graph_of(run_tree(run).nodes)
    else:
        workflow = None if kind == "run" else await session.get_workflow(api, namespace, name)
        if workflow is None:
            raise NotFound(f"no WorkflowRun or Workflow {name!r} in namespace {namespace}")
        drawn = graph.graph_of(step_nodes(workflow.get("spec") or {}))
    io.out(graph.mermaid(drawn) if form == "mermaid" else graph.dot(drawn, name))
    return 0


async def export(api: KubeApi, namespace: str, io: Io, name: str, form: str) -> int:
    workflow = await session.get_workflow(api, namespace, name)
    if workflow is None:
        raise NotFound(f"no Workflow {name!r} in namespace {namespace}")
    clean = manifests.clean_workflow(workflow)
    io.out(json.dumps(clean, indent=2) if form == "json" else yaml.safe_dump(clean, sort_keys=False).rstrip("\n"))
    return 0


async def connectors(api: KubeApi, namespace: str, io: Io, as_json: bool) -> int:
    """The built-ins, the namespace's StepTypes and the cluster's ClusterStepTypes (those the caller may read)."""
    # A command-only import: the catalog loads every connector, which no other command needs.
    from towline.plugin.connectors import render as render_connectors  # noqa: PLC0415
    from towline.plugin.connectors import step_types_of  # noqa: PLC0415

    namespaced, cluster = await list_step_types(api, namespace)
    types, problems = step_types_of([*namespaced, *(cluster or [])])
    io.out(render_connectors(types, as_json=as_json).rstrip("\n"))
    if cluster is None:
        io.err("note: you may not list ClusterStepTypes; showing the built-ins and this namespace's StepTypes")
    for problem in problems:
        io.err(f"not usable: {problem}")
    return 0
