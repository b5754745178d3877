"""Reading a StepType or ClusterStepType and writing its status (the Ready condition), nothing else."""

from __future__ import annotations

from towline.jsontypes import JSON
from towline.k8s.client import CLUSTER_STEP_TYPES, STEP_TYPES, ApiError, KubeApi, Resource


def _resource(namespace: str) -> Resource:
    return STEP_TYPES if namespace else CLUSTER_STEP_TYPES


async def read_step_type(api: KubeApi, namespace: str, name: str) -> JSON | None:
    """The StepType `namespace/name`, or the ClusterStepType `name` when `namespace` is empty."""
    return await api.get(_resource(namespace).path(namespace or None, name))


async def write_step_type_status(api: KubeApi, body: JSON, status: JSON) -> JSON | None:
    """Only the status subresource, with the resourceVersion read: a concurrent write is a Conflict."""
    if body.get("status") == status:
        return None
    meta = body["metadata"]
    namespace = meta.get("namespace") or ""
    update = {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {key: meta[key] for key in ("name", "namespace", "resourceVersion") if key in meta},
        "spec": body["spec"],
        "status": status,
    }
    return await api.replace(_resource(namespace).path(namespace or None, meta["name"], "status"), update)


async def list_step_types(api: KubeApi, namespace: str) -> tuple[list[JSON], list[JSON] | None]:
    """The namespace's StepTypes, and the cluster's ClusterStepTypes (None when the caller may not list them)."""
    namespaced = [{**body, "kind": "StepType"} for body in await api.list(STEP_TYPES.path(namespace))]
    try:
        cluster = [{**body, "kind": "ClusterStepType"} for body in await api.list(CLUSTER_STEP_TYPES.path())]
    except ApiError as error:
        if error.status != 403:
            raise
        return namespaced, None
    return namespaced, cluster
