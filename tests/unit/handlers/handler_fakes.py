"""An in-memory API server behind the real `KubeApi`, and the process around it, for handler tests.

`MemoryApi` replaces only `KubeApi.request`, the one method that talks HTTP, so
`get` (404 -> None), `create` (409 -> adopt), `replace`, `merge_patch`,
`delete` and `list` run as they do against a cluster. It answers like the API
server for what the handlers rely on: objects keyed by kind, namespace and
name, opaque string resourceVersions bumped on every write, a PUT naming a
stale resourceVersion refused with 409, a create of an existing name refused
with 409, the status subresource writing only `status` and the main resource
never writing it, `metadata.generation` raised by spec changes, a 404 for what
does not exist, equality label selectors on lists. Nothing in it knows a test.

`MemoryContext` builds each reconciler's dependencies (towline.handlers.context)
from its fields, records what the reconcilers ask of the process (requeues,
written versions, finished runs) and observes a run's children through the
real `towline.k8s.observe` lists, as the runtime does on a cache miss.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from towline.api.run import WorkflowRun, WorkflowRunStatus
from towline.api.workflow import LastRun
from towline.engine.admission import RunInLine
from towline.engine.observed import Observed
from towline.handlers.context import ArchiveHold, Definitions, Key, RunDeps, StepTypeDeps, WorkflowDeps
from towline.handlers.history import FinishedRun
from towline.handlers.parsed import ParsedRuns
from towline.jsontypes import JSON
from towline.k8s.actions import ActionContext
from towline.k8s.client import EVENTS, JOBS, PODS, WORKFLOW_RUNS, WORKFLOWS, ApiError, Conflict, KubeApi
from towline.k8s.connection import Connection
from towline.k8s.labels import STEP_JOB_MANAGER
from towline.k8s.objects import StepPodSettings
from towline.k8s.observe import list_children, observe_run
from towline.k8s.steppods import keep_step_pods
from towline.validation.catalog import ConnectorCatalog, connector_catalog
from towline.validation.codesteps import CodeStepPolicy
from towline.validation.steptypes import StepImagePolicy, check_step_type

StoreKey = tuple[str, str, str]
"""(group/version/plural, namespace or "", name)"""

STEP_IMAGES = StepImagePolicy(allowed_prefixes=("localhost/towline-steps/",))


@dataclass(frozen=True)
class Target:
    """What a request path names: a collection, an object, or an object's subresource."""

    resource: str
    namespace: str
    name: str | None
    subresource: str | None


def parse_path(path: str) -> Target:
    parts = [part for part in path.split("/") if part]
    group_version, rest = ("/".join(parts[:2]), parts[2:]) if parts[0] == "api" else ("/".join(parts[:3]), parts[3:])
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    return Target(f"{group_version}/{rest[0]}", namespace, rest[1] if len(rest) > 1 else None,
                  rest[2] if len(rest) > 2 else None)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def primitive_list_deletions(target: JSON, patch: JSON) -> JSON:
    """The one strategic-merge directive the operator sends (`$deleteFromPrimitiveList/<list>` under metadata),
    as the equivalent JSON merge patch."""
    metadata: JSON = {}
    for key, value in (patch.get("metadata") or {}).items():
        directive, _, field_name = key.partition("/")
        assert directive == "$deleteFromPrimitiveList", f"unsupported strategic-merge patch {key}"
        kept = [item for item in target["metadata"].get(field_name) or [] if item not in value]
        metadata[field_name] = kept or None
    return {"metadata": metadata}


def matches(labels: Mapping[str, str], selector: str) -> bool:
    """Equality-based selector `a=b,c=d` (the only form the operator sends)."""
    wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
    return all(labels.get(key) == value for key, value in wanted.items())


class MemoryApi(KubeApi):
    def __init__(self) -> None:
        super().__init__(Connection(server="http://memory.invalid"))
        self.objects: dict[StoreKey, JSON] = {}
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request, in order."""
        self._versions = itertools.count(100)
        self._uids = itertools.count(1)

    async def request(self, method: str, path: str, *, body: Any = None, query: Mapping[str, str] | None = None,
                      content_type: str = "application/json") -> JSON:
        self.requests.append((method, path))
        target = parse_path(path)
        if method == "GET":
            if target.name is None:
                selector = (query or {}).get("labelSelector", "")
                return {"items": [copy.deepcopy(obj) for (resource, namespace, _), obj in sorted(self.objects.items())
                                  if resource == target.resource and namespace == target.namespace
                                  and matches(obj["metadata"].get("labels") or {}, selector)]}
            return copy.deepcopy(self._existing(target))
        if method == "POST":
            return self._create(target, copy.deepcopy(body))
        if method == "PUT":
            return self._write(target, copy.deepcopy(body), check_version=True)
        if method == "PATCH" and content_type == "application/strategic-merge-patch+json":
            body = primitive_list_deletions(self._existing(target), body)
        if method == "PATCH":
            existing = self._existing(target)
            part = "status" if target.subresource == "status" else None
            patch = {"status": body.get("status")} if part else {k: v for k, v in body.items() if k != "status"}
            return self._write(target, merge_patch(existing, patch), check_version=False)
        if method == "DELETE":
            existing = self._existing(target)
            if existing["metadata"].get("finalizers"):  # kept, marked, until its finalizers are removed
                existing["metadata"].setdefault("deletionTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
                return copy.deepcopy(existing)
            del self.objects[self._key(target)]
            return {"kind": "Status", "status": "Success"}
        raise ApiError(405, f"the server does not allow this method on the requested resource: {method}")

    def _key(self, target: Target) -> StoreKey:
        assert target.name is not None
        return target.resource, target.namespace, target.name

    def _existing(self, target: Target) -> JSON:
        found = self.objects.get(self._key(target))
        if found is None:
            raise ApiError(404, f'{target.resource.rsplit("/", 1)[-1]} "{target.name}" not found')
        return found

    def _create(self, target: Target, body: JSON) -> JSON:
        meta = body.setdefault("metadata", {})
        if "name" not in meta and "generateName" in meta:
            meta["name"] = f"{meta['generateName']}{next(self._uids):05d}"
        key = (target.resource, target.namespace, meta["name"])
        if key in self.objects:
            raise Conflict(409, f'{target.resource.rsplit("/", 1)[-1]} "{meta["name"]}" already exists')
        if target.namespace:
            meta["namespace"] = target.namespace
        meta.update(uid=f"uid-{next(self._uids)}", generation=1, resourceVersion=str(next(self._versions)),
                    creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        body.pop("status", None)  # the status subresource is the only way to write status
        self.objects[key] = body
        return copy.deepcopy(body)

    def _write(self, target: Target, body: JSON, *, check_version: bool) -> JSON:
        existing = self._existing(target)
        sent = (body.get("metadata") or {}).get("resourceVersion")
        if check_version and sent != existing["metadata"]["resourceVersion"]:
            raise Conflict(409, f'Operation cannot be fulfilled on {target.resource.rsplit("/", 1)[-1]} '
                                f'"{target.name}": the object has been modified; please apply your changes to '
                                "the latest version and try again")
        updated = copy.deepcopy(existing)
        if target.subresource == "status":
            updated["status"] = body.get("status")
        else:
            for part, value in body.items():
                if part not in ("metadata", "status"):
                    updated[part] = value
            for part in ("labels", "annotations", "ownerReferences", "finalizers"):
                if part in body.get("metadata", {}):
                    updated["metadata"][part] = body["metadata"][part]
                elif part == "finalizers":
                    updated["metadata"].pop(part, None)
            if updated.get("spec") != existing.get("spec"):
                updated["metadata"]["generation"] += 1
        if updated != existing:
            updated["metadata"]["resourceVersion"] = str(next(self._versions))
        if updated["metadata"].get("deletionTimestamp") and not updated["metadata"].get("finalizers"):
            del self.objects[self._key(target)]  # its last finalizer gone: deleted
            return copy.deepcopy(updated)
        self.objects[self._key(target)] = updated
        return copy.deepcopy(updated)

    # What other writers (kubectl, the Job controller, the kubelet) do, by the same requests.
    async def apply(self, body: JSON) -> JSON:
        """Create `body` and, if it carries a status, write that through the status subresource."""
        path = path_of(body)
        created, _ = await self.create(path, body)
        if "status" not in body:
            return created
        return await self.replace(f"{path}/{created['metadata']['name']}/status",
                                  {**created, "status": body["status"]})

    def stored(self, resource: str, namespace: str, name: str) -> JSON | None:
        return self.objects.get((resource, namespace, name))

    def of_kind(self, resource: str) -> list[JSON]:
        return [obj for (kind, _, _), obj in sorted(self.objects.items()) if kind == resource]


def path_of(body: JSON) -> str:
    group_version = body["apiVersion"]
    plural = {"Workflow": "workflows", "WorkflowRun": "workflowruns", "Job": "jobs", "Pod": "pods",
              "ConfigMap": "configmaps"}[body["kind"]]
    prefix = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    return f"{prefix}/namespaces/{body['metadata']['namespace']}/{plural}"


def resource_of(path: str) -> str:
    return parse_path(path).resource


RUNS = resource_of(WORKFLOW_RUNS.path("x"))
WORKFLOW_KIND = resource_of(WORKFLOWS.path("x"))
JOB_KIND = resource_of(JOBS.path("x"))
POD_KIND = resource_of(PODS.path("x"))
EVENT_KIND = resource_of(EVENTS.path("x"))


async def finish_job(api: MemoryApi, namespace: str, job_name: str, document: JSON) -> None:
    """What the kubelet does for a step that ran: the Job's pod (the operator made it, for a Job it keeps) ends,
    its step container with `document` as its termination message. For a Job the Job controller keeps (an earlier
    release's), also what that controller does: the pod from the Job's template, and the Job marked Complete."""
    job = api.stored(JOB_KIND, namespace, job_name)
    assert job is not None, f"no Job {job_name}"
    template = job["spec"]["template"]
    containers = template["spec"].get("containers") or []
    statuses = [{"name": c["name"], "image": c["image"], "imageID": c["image"], "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                          "message": json.dumps(document) if c["name"] == "step" else ""}}}
                for c in containers]
    pod = api.stored(POD_KIND, namespace, job_name)
    if job["spec"].get("managedBy") == STEP_JOB_MANAGER:
        assert pod is not None, f"the operator made no pod for its Job {job_name}"
        await api.replace(f"{PODS.path(namespace, job_name)}/status", {
            **pod, "status": {"phase": "Succeeded", "containerStatuses": statuses}})
        return
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job["metadata"]["uid"],
             "controller": True}
    await api.apply({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{job_name}-pod", "namespace": namespace,
                                  "labels": template["metadata"].get("labels") or {}, "ownerReferences": [owner]},
                     "spec": template["spec"], "status": {"phase": "Succeeded", "containerStatuses": statuses}})
    await api.replace(f"{JOBS.path(namespace, job_name)}/status", {**job, "status": {
        "succeeded": 1, "startTime": "2026-12-01T10:00:00Z", "completionTime": "2026-12-01T10:00:05Z",
        "conditions": [{"type": "Complete", "status": "True"}]}})


@dataclass
class MemoryContext:
    """The process as a reconciler sees it, over a MemoryApi: it builds each reconciler's dependencies from its
    fields (as the runtime's `Operator` does) and records what the reconciler asks of the process."""

    api: MemoryApi = field(default_factory=MemoryApi)
    catalog: ConnectorCatalog = field(default_factory=connector_catalog)
    code_steps: CodeStepPolicy = field(default_factory=CodeStepPolicy)
    archive_finalizer: str | None = None
    archive_max_runs_awaiting: int = 0
    awaiting_archive: dict[str, int] = field(default_factory=dict)
    """Per namespace, what the watch-fed view counts of ended runs the archive has not written yet."""
    identity_user: str = "system:serviceaccount:towline-system:towline-operator"
    clock: datetime = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    """What Workflows' schedules fire by."""
    watched: dict[Key, JSON] = field(default_factory=dict)
    """Run bodies as the watch last showed them (tests put stale ones here); the run memory answers from it."""
    in_line: list[RunInLine] = field(default_factory=list)
    """What the watch-fed view of a workflow's runs shows (may be behind the API server)."""
    conflicted_runs: list[Key] = field(default_factory=list)
    requeued_workflows: list[Key] = field(default_factory=list)
    requeued_step_types: list[Key] = field(default_factory=list)
    woken: list[tuple[str, str]] = field(default_factory=list)
    written: dict[Key, JSON] = field(default_factory=dict)
    decided: list[tuple[Key, str]] = field(default_factory=list)
    finished: list[JSON] = field(default_factory=list)
    parsed: ParsedRuns = field(default_factory=ParsedRuns)
    """The real cache of parsed runs, so every handler test passes through it."""
    action_context: ActionContext = field(init=False)

    def __post_init__(self) -> None:
        self.action_context = ActionContext(api=self.api, pod_settings=StepPodSettings(),
                                            catalog=self.catalog)

    def definitions(self) -> Definitions:
        return Definitions(catalog=self.catalog, code_steps=self.code_steps, step_types_for=lambda namespace: {},
                           check_step_type=lambda body: check_step_type(body, STEP_IMAGES))

    def for_runs(self) -> RunDeps:
        """The run reconciler's dependencies as the fields are now. Runs keep the machine's clock, as the
        operator's do (only schedules follow `clock`)."""
        return RunDeps(
            api=self.api, actions=self.action_context, definitions=self.definitions(), runs=WatchView(self),
            memory=self, children=self,
            archive=ArchiveHold(finalizer=self.archive_finalizer, max_runs_awaiting=self.archive_max_runs_awaiting),
            now=lambda: datetime.now(UTC), decided=lambda key, phase: self.decided.append((key, phase)),
            finished=self._finished,
        )

    def for_workflows(self) -> WorkflowDeps:
        return WorkflowDeps(api=self.api, definitions=self.definitions(), runs=WatchView(self), now=lambda: self.clock,
                            creator=self.identity_user,
                            wake_queued_runs=lambda namespace, workflow: self.woken.append((namespace, workflow)),
                            requeue=self.requeued_workflows.append)

    def for_step_types(self) -> StepTypeDeps:
        return StepTypeDeps(api=self.api, check_step_type=self.definitions().check_step_type,
                            requeue=self.requeued_step_types.append, now=lambda: self.clock)

    async def _finished(self, run: JSON) -> None:
        self.finished.append(run)

    # RunChildren: the real lists, as the runtime does on a cache miss
    async def observe(self, namespace: str, run: str, run_uid: str, status: WorkflowRunStatus) -> Observed:
        return await observe_run(self.api, namespace, run, run_uid)

    async def keep_step_pods(self, namespace: str, run: str, now: datetime, *, run_over: bool = False,
                             ) -> datetime | None:
        jobs, pods, _ = await list_children(self.api, namespace, run)
        return await keep_step_pods(self.api, jobs, pods, now, run_over=run_over)

    # RunMemory
    def latest(self, key: Key) -> JSON | None:
        return self.watched.get(key)

    def parse(self, key: Key, raw: JSON) -> WorkflowRun:
        return self.parsed.parse(key, raw)

    def wrote(self, key: Key, written: JSON, run: WorkflowRun) -> None:
        self.written[key] = written
        self.parsed.wrote(key, written, run)

    def conflicted(self, key: Key) -> None:
        self.conflicted_runs.append(key)
        self.watched.pop(key, None)



@dataclass(frozen=True)
class WatchView:
    """The RunLister over a MemoryContext's fields: what a test says the watch shows."""

    context: MemoryContext

    def in_line(self, namespace: str, workflow: str) -> list[RunInLine]:
        return list(self.context.in_line)

    def awaiting_archive(self, namespace: str) -> int:
        return self.context.awaiting_archive.get(namespace, 0)

    def last_run_of(self, namespace: str, workflow: str) -> LastRun | None:
        return None

    def finished_runs_of(self, namespace: str, workflow: str) -> list[FinishedRun]:
        return []


NAMESPACE = "team"
TWO_STEPS: JSON = {
    "params": [{"name": "version", "type": "string", "default": "1.0.0"}],
    "steps": [
        {"id": "plan", "action": "data.transform",
         "with": {"data": {"version": "${{ params.version }}"}, "fields": {"release": "'v' + data.version"}}},
        {"id": "release", "needs": ["plan"], "action": "data.transform",
         "with": {"data": {"release": "${{ steps.plan.output.release }}"}, "fields": {"done": "data.release"}}},
    ],
}


def workflow(name: str, spec: JSON) -> JSON:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def run(name: str, workflow_name: str, **spec: Any) -> JSON:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"workflowRef": {"name": workflow_name}, **spec}}


def setup(context: MemoryContext, *bodies: JSON) -> None:
    for body in bodies:
        asyncio.run(context.api.apply(body))


def status_of(context: MemoryContext, name: str, resource: str = RUNS) -> JSON:
    body = context.api.stored(resource, NAMESPACE, name)
    assert body is not None, f"{name} does not exist"
    return dict(body.get("status") or {})


def version_of(context: MemoryContext, name: str, resource: str = RUNS) -> str:
    body = context.api.stored(resource, NAMESPACE, name)
    assert body is not None, f"{name} does not exist"
    return str(body["metadata"]["resourceVersion"])


def jobs(context: MemoryContext) -> list[str]:
    return [job["metadata"]["name"] for job in context.api.of_kind(JOB_KIND)]


def events(context: MemoryContext) -> list[tuple[str, str, str]]:
    """(involved object, type, reason) of every Event recorded."""
    return [(event["involvedObject"]["name"], event["type"], event["reason"])
            for event in context.api.of_kind(EVENT_KIND)]
