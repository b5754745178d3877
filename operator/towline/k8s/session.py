"""What a person's command line (`kubectl towline`) asks of the API server.

Every call is made as the person whose kubeconfig context is in use; the API
server's RBAC and admission policies decide what they may do, so nothing here
checks permissions itself. Names that must be truthful (`requestedBy`,
`decidedBy`) come from the API server's own answer to "who am I"
(SelfSubjectReview), never from a flag. Never reads Secret values.
"""

from __future__ import annotations

import json

from towline.jsontypes import JSON
from towline.k8s import kubeconfig as kubeconfig_loader
from towline.k8s.client import (
    APPROVALS,
    EVENTS,
    PODS,
    REQUEST_TIMEOUT,
    TRANSPORT_ERRORS,
    WORKFLOW_RUNS,
    WORKFLOWS,
    ApiError,
    ApiUnavailable,
    KubeApi,
    Resource,
)
from towline.k8s.labels import LABEL_RUN, LABEL_STEP, identifier_label

DEPLOYMENTS = Resource("apps", "v1", "deployments")
SELF_SUBJECT_REVIEWS = Resource("authentication.k8s.io", "v1", "selfsubjectreviews", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
SELF_SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews", namespaced=False)
SECRETS = Resource("", "v1", "secrets")
"""Listed as metadata only (names), never read: `secret_names`."""
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


async def who_am_i(api: KubeApi) -> str:
    """The user name the API server authenticates this client as."""
    return str((await user_info(api))["username"])


async def user_info(api: KubeApi) -> JSON:
    """The API server's own answer to who this client is: `username` and `groups` (as admission sees them)."""
    review = await api.request("POST", SELF_SUBJECT_REVIEWS.path(), body={
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
    })
    info: JSON = (review.get("status") or {}).get("userInfo") or {}
    if not info.get("username"):
        raise ApiError(500, "the API server's SelfSubjectReview carried no user name")
    return info


async def list_namespaces(api: KubeApi) -> list[JSON]:
    """The cluster's namespaces (raises ApiError 403 when the caller may not list them)."""
    return await api.list(NAMESPACES.path())


async def get_workflow(api: KubeApi, namespace: str, name: str) -> JSON | None:
    return await api.get(WORKFLOWS.path(namespace, name))


async def apply_workflow_annotations(api: KubeApi, namespace: str, name: str, annotations: dict[str, str],
                                     field_manager: str) -> JSON:
    """Server-side apply of exactly these annotations as `field_manager` (without force): the keys it applied
    before and leaves out now are removed unless another manager also owns them; a key another manager set to
    another value is a conflict (409) the API server names."""
    body = {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations}}
    return await api.request("PATCH", WORKFLOWS.path(namespace, name), body=body,
                             query={"fieldManager": field_manager}, content_type="application/apply-patch+yaml")


async def apply_workflow(api: KubeApi, namespace: str, document: JSON, *, field_manager: str,
                         dry_run: bool = False) -> JSON:
    """Server-side apply of a whole Workflow manifest as `field_manager`, without force: a field another manager
    owns with another value is a conflict (409) the API server names. `dry_run`: admission and the schema judge
    it (`dryRun=All`) and nothing is stored."""
    name = str((document.get("metadata") or {}).get("name") or "")
    query = {"fieldManager": field_manager, **({"dryRun": "All"} if dry_run else {})}
    return await api.request("PATCH", WORKFLOWS.path(namespace, name), body=document, query=query,
                             content_type="application/apply-patch+yaml")


async def may_i(api: KubeApi, verb: str, resource: Resource, namespace: str, name: str | None = None) -> bool:
    """The API server's own answer (SelfSubjectAccessReview) to whether this client may `verb` the resource."""
    attributes = {"verb": verb, "group": resource.group, "resource": resource.plural, "namespace": namespace,
                  **({"name": name} if name else {})}
    review = await api.request("POST", SELF_SUBJECT_ACCESS_REVIEWS.path(), body={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    })
    return bool((review.get("status") or {}).get("allowed"))


async def secret_names(api: KubeApi, namespace: str) -> list[str]:
    """The names of the namespace's Secrets, asked for as metadata only (PartialObjectMetadataList), so no
    value ever leaves the API server; raises ApiError 403 when the caller may not list Secrets."""
    try:
        response = await api.send("GET", SECRETS.path(namespace), query=None, accept=METADATA_ONLY,
                                  timeout=REQUEST_TIMEOUT)
        raw = await response.read()
    except TRANSPORT_ERRORS as error:
        raise ApiUnavailable(error) from error
    try:
        listed = json.loads(raw)
    except ValueError:
        listed = None
    if not isinstance(listed, dict) or response.status >= 400:
        message = str((listed or {}).get("message") or raw[:300].decode(errors="replace"))
        raise ApiError(response.status if response.status >= 400 else 502, message, listed)
    if listed.get("kind") != "PartialObjectMetadataList":
        raise ApiError(502, f"the API server answered a {listed.get('kind')!r} for Secrets' metadata; expected "
                            "PartialObjectMetadataList (names only)")
    return sorted({str((item.get("metadata") or {}).get("name")) for item in listed.get("items") or []} - {"None"})


async def list_workflows(api: KubeApi, namespace: str | None) -> list[JSON]:
    """One namespace's Workflows, or those of every namespace the caller may list (`None`)."""
    return await api.list(WORKFLOWS.path(namespace))


async def get_run(api: KubeApi, namespace: str, name: str) -> JSON | None:
    return await api.get(WORKFLOW_RUNS.path(namespace, name))


async def list_runs(
    api: KubeApi, namespace: str | None, workflow: str | None = None, *, selector: str | None = None,
) -> list[JSON]:
    """Runs of one namespace, or of every namespace the caller may list (`None`); by label selector (the API
    server filters) and by the Workflow they run."""
    runs = await api.list(WORKFLOW_RUNS.path(namespace), label_selector=selector)
    if workflow is not None:
        runs = [r for r in runs if (r.get("spec") or {}).get("workflowRef", {}).get("name") == workflow]
    return runs


async def create_run(api: KubeApi, namespace: str, body: JSON, *, dry_run: bool = False) -> JSON:
    """Create a run (usually with `generateName`); the server's copy comes back. `dry_run`: admission judges
    it and nothing is stored (`dryRun=All`)."""
    query = {"dryRun": "All"} if dry_run else None
    return await api.request("POST", WORKFLOW_RUNS.path(namespace), body=body, query=query)


async def patch_run(api: KubeApi, namespace: str, name: str, patch: JSON) -> JSON:
    """A merge patch of the user's switches (spec.cancel, spec.suspend) or the resume annotation."""
    return await api.merge_patch(WORKFLOW_RUNS.path(namespace, name), patch)


async def delete_run(api: KubeApi, namespace: str, name: str) -> bool:
    """Delete a run (its Approvals and Jobs go with it); False if it was gone already."""
    return await api.delete(WORKFLOW_RUNS.path(namespace, name))


async def get_approval(api: KubeApi, namespace: str, name: str) -> JSON | None:
    return await api.get(APPROVALS.path(namespace, name))


async def list_approvals(api: KubeApi, namespace: str | None, *, selector: str | None = None) -> list[JSON]:
    """The namespace's Approvals, or every namespace's (None) that the caller may list; by label selector."""
    return await api.list(APPROVALS.path(namespace), label_selector=selector)


async def decide_approval(api: KubeApi, namespace: str, name: str, spec: JSON) -> JSON:
    return await api.merge_patch(APPROVALS.path(namespace, name), {"spec": spec})


async def step_pods(api: KubeApi, namespace: str, run: str, step: str | None = None) -> list[JSON]:
    """The run's step pods (optionally one step's), oldest first."""
    selector = f"{LABEL_RUN}={run}"
    if step is not None:
        selector += f",{LABEL_STEP}={identifier_label(step)}"
    pods = await api.list(PODS.path(namespace), label_selector=selector)
    return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")


async def pod_log(api: KubeApi, namespace: str, pod: str, query: dict[str, str] | None = None) -> str:
    """The pod's log as the kubelet serves it (`query`: the log API's tailLines, sinceSeconds, timestamps,
    container); raises ApiError when it cannot."""
    return await api.read_text(PODS.path(namespace, pod, "log"), query=query or None)


def kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context in use (as kubectl picks it, $KUBECONFIG merged), else `default`."""
    return kubeconfig_loader.namespace(kubeconfig, context)


async def approvals_of_run(api: KubeApi, namespace: str, run: str) -> list[JSON]:
    """The Approvals the operator opened for `run` (spec.runName), oldest first."""
    approvals = [a for a in await api.list(APPROVALS.path(namespace)) if (a.get("spec") or {}).get("runName") == run]
    return sorted(approvals, key=lambda a: a["metadata"].get("creationTimestamp") or "")


async def events_of(api: KubeApi, namespace: str, kind: str, name: str) -> list[JSON]:
    """The core/v1 Events about one object (involvedObject), oldest first."""
    events = await api.list(EVENTS.path(namespace),
                            field_selector=f"involvedObject.kind={kind},involvedObject.name={name}")
    return sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or
                  e["metadata"].get("creationTimestamp") or "")


async def server_version(api: KubeApi) -> JSON:
    """The API server's /version (gitVersion, platform): readable by every authenticated user."""
    return await api.request("GET", "/version")


async def towline_deployments(api: KubeApi) -> list[JSON]:
    """The Deployments of Towline releases the caller may see, cluster-wide (raises ApiError 403 if not allowed)."""
    return await api.list(DEPLOYMENTS.path(None), label_selector="app.kubernetes.io/name=towline")
