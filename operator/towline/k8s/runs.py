"""Reading and writing the resources the operator owns the status of.

Status is written once per reconcile pass with a PUT that carries the
resourceVersion that was read: if anybody wrote in between, the API server
answers 409 and the caller re-reads and decides again. Spec, labels and
annotations of a Workflow are never written.
"""

from __future__ import annotations

from towline.jsontypes import JSON
from towline.k8s.client import CONFIG_MAPS, WORKFLOW_RUNS, WORKFLOWS, KubeApi


async def read_run(api: KubeApi, namespace: str, name: str) -> JSON | None:
    return await api.get(WORKFLOW_RUNS.path(namespace, name))


async def read_workflow(api: KubeApi, namespace: str, name: str) -> JSON | None:
    return await api.get(WORKFLOWS.path(namespace, name))


async def read_config_map(api: KubeApi, namespace: str, name: str) -> JSON | None:
    """A ConfigMap a code.wasm step takes its module from (the chart grants `get` only with codeSteps.enabled)."""
    return await api.get(CONFIG_MAPS.path(namespace, name))


async def list_workflows(api: KubeApi, namespace: str) -> list[JSON]:
    """The namespace's Workflows (a Workflow with subflow steps is checked against them)."""
    return await api.list(WORKFLOWS.path(namespace))


async def list_runs(api: KubeApi, namespace: str) -> list[JSON]:
    return await api.list(WORKFLOW_RUNS.path(namespace))


async def write_run_status(api: KubeApi, run: JSON, status: JSON) -> JSON | None:
    """Replace the run's status if it changed; raises Conflict on a concurrent write."""
    if run.get("status") == status:
        return None
    meta = run["metadata"]
    return await api.replace(WORKFLOW_RUNS.path(meta["namespace"], meta["name"], "status"), status_body(run, status))


async def write_workflow_status(api: KubeApi, workflow: JSON, status: JSON) -> JSON | None:
    """Only the status subresource: the synced spec, labels and annotations stay untouched."""
    if workflow.get("status") == status:
        return None
    meta = workflow["metadata"]
    return await api.replace(WORKFLOWS.path(meta["namespace"], meta["name"], "status"), status_body(workflow, status))


def status_body(obj: JSON, status: JSON) -> JSON:
    """The body of a status write of `obj` (a Workflow or a run) as read, at its resourceVersion.

    The body carries the labels and annotations as read: the API server keeps the old metadata on a status write
    but records in managedFields what the body left out as given up by every manager, so a body without them
    would take a GitOps tool's, `kubectl towline schedule`'s or a run creator's ownership of them away."""
    meta = obj["metadata"]
    kept = {key: meta[key] for key in ("labels", "annotations") if key in meta}
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "resourceVersion": meta["resourceVersion"],
                     **kept},
        "spec": obj["spec"],
        "status": status,
    }


async def create_run(api: KubeApi, namespace: str, body: JSON) -> tuple[JSON, bool]:
    """Create a run; a 409 (the same deterministic name) adopts the existing one."""
    return await api.create(WORKFLOW_RUNS.path(namespace), body)


async def cancel_run(api: KubeApi, namespace: str, name: str) -> None:
    """Flip the run's user switch `spec.cancel` (the Replace concurrency policy)."""
    await api.merge_patch(WORKFLOW_RUNS.path(namespace, name), {"spec": {"cancel": True}})


async def hold_for_archive(api: KubeApi, run: JSON, finalizer: str) -> JSON:
    """The run with the archive's finalizer added (the API server's answer), or as it is when it has it already or
    is being deleted (no finalizer may join then). The patch names the resourceVersion read: Conflict if it moved."""
    meta = run["metadata"]
    held = list(meta.get("finalizers") or [])
    if finalizer in held or meta.get("deletionTimestamp"):
        return run
    patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": [*held, finalizer]}}
    return await api.merge_patch(WORKFLOW_RUNS.path(meta["namespace"], meta["name"]), patch)


async def delete_run(api: KubeApi, namespace: str, name: str) -> bool:
    """Delete a run and, through owner references, its Jobs, policies and Approvals."""
    return await api.delete(WORKFLOW_RUNS.path(namespace, name), propagation="Background")
