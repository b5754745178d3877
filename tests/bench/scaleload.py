"""The scale benchmarks' workloads and what they observe: Workflows, run creation, a watch of Jobs, their pods
and runs.

Times are taken in this process when an event arrives (time.monotonic), the
same way for Towline and for the raw client, so both carry the same watch lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from towline.jsontypes import JSON
from towline.k8s.client import JOBS, PODS, WORKFLOW_RUNS, KubeApi
from towline.k8s.labels import ANNOTATION_STEP_ID, LABEL_RUN

TERMINAL = frozenset({"Succeeded", "Failed", "Cancelled"})
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
"""The label the API server puts on a Job's pod template (and so on its pods, whoever makes them)."""


@dataclass(frozen=True)
class Shape:
    """A workflow's DAG as levels: every step of a level needs every step of the level before."""

    name: str
    levels: tuple[tuple[str, ...], ...]

    @property
    def steps(self) -> int:
        return sum(len(level) for level in self.levels)

    def needs(self) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        previous: tuple[str, ...] = ()
        for level in self.levels:
            for step in level:
                found[step] = previous
            previous = level
        return found


def chain(length: int) -> Shape:
    return Shape(f"chain{length}", tuple((f"s{i}",) for i in range(length)))


def fan_out_in(width: int) -> Shape:
    """One step, `width` steps that need it, one step that needs them all: width + 2 steps."""
    return Shape(f"fan{width + 2}", (("start",), tuple(f"m{i}" for i in range(width)), ("join",)))


def step_inputs(step: str) -> JSON:
    return {"data": {"step": step}, "fields": {"seen": "data.step"}}


def workflow(shape: Shape, namespace: str, *, keep: int | None = None) -> JSON:
    """The shape as a Workflow; `keep`: finished runs its history keeps (None: the default, 10 of each)."""
    needs = shape.needs()
    steps = []
    for level in shape.levels:
        for step in level:
            entry: JSON = {"id": step, "action": "data.transform", "with": step_inputs(step)}
            if needs[step]:
                entry["needs"] = list(needs[step])
            steps.append(entry)
    spec: JSON = {"steps": steps}
    if keep is not None:
        spec["policy"] = {"history": {"succeeded": keep, "failed": keep}}
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": shape.name, "namespace": namespace}, "spec": spec}


def run_manifest(shape: Shape, namespace: str, name: str, requested_by: str) -> JSON:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"workflowRef": {"name": shape.name}, "requestedBy": requested_by}}


@dataclass
class Observations:
    """What the watches saw, keyed by (run, step) for Jobs and by run for runs."""

    expected_runs: int
    run_created: dict[str, float] = field(default_factory=dict)
    run_finished: dict[str, float] = field(default_factory=dict)
    run_phase: dict[str, str] = field(default_factory=dict)
    job_created: dict[tuple[str, str], float] = field(default_factory=dict)
    job_completed: dict[tuple[str, str], float] = field(default_factory=dict)
    job_names: dict[tuple[str, str], str] = field(default_factory=dict)
    job_keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    pod_created: dict[str, float] = field(default_factory=dict)
    """By Job name: when the first pod of that Job was seen."""
    pod_succeeded: dict[str, float] = field(default_factory=dict)
    """By Job name: when a pod of that Job was seen Succeeded."""
    completions: dict[tuple[str, str], asyncio.Future[None]] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def completion(self, run: str, step: str) -> asyncio.Future[None]:
        """Done once the step is seen over (`step_ended`: its pod succeeded or its Job Complete), the moment the
        operator moves on (towline.k8s.observe.attempt_state), so the raw client stays the limit."""
        return self.completions.setdefault((run, step), asyncio.get_running_loop().create_future())

    def saw_job(self, job: JSON) -> None:
        meta = job["metadata"]
        key = ((meta.get("labels") or {}).get(LABEL_RUN, ""),
               (meta.get("annotations") or {}).get(ANNOTATION_STEP_ID, ""))
        now = time.monotonic()
        self.job_created.setdefault(key, now)
        self.job_names[key] = meta["name"]
        self.job_keys[meta["name"]] = key
        conditions = (job.get("status") or {}).get("conditions") or []
        complete = any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)
        if complete and key not in self.job_completed:
            self.job_completed[key] = now
            self._ended(key)
        if self.job_names[key] in self.pod_succeeded:  # the pod's end seen before the Job's first event
            self._ended(key)

    def _ended(self, key: tuple[str, str]) -> None:
        future = self.completion(*key)
        if not future.done():
            future.set_result(None)

    def saw_pod(self, pod: JSON) -> None:
        job = (pod["metadata"].get("labels") or {}).get(JOB_NAME_LABEL)
        if not job:
            return
        now = time.monotonic()
        self.pod_created.setdefault(job, now)
        if (pod.get("status") or {}).get("phase") == "Succeeded":
            self.pod_succeeded.setdefault(job, now)
            if job in self.job_keys:
                self._ended(self.job_keys[job])

    def step_ended(self, key: tuple[str, str]) -> float | None:
        """When the step was first seen over: its pod succeeded or its Job Complete, whichever came first."""
        ends = [self.job_completed.get(key), self.pod_succeeded.get(self.job_names.get(key, ""))]
        return min((end for end in ends if end is not None), default=None)

    def saw_run(self, run: JSON) -> None:
        name = run["metadata"]["name"]
        phase = (run.get("status") or {}).get("phase") or "Pending"
        self.run_phase[name] = phase
        if phase in TERMINAL and name not in self.run_finished:
            self.run_finished[name] = time.monotonic()
            if len(self.run_finished) >= self.expected_runs:
                self.done.set()

    def first_job_latencies(self) -> list[float]:
        """Run created (its create call answered) -> its first Job seen."""
        firsts: dict[str, float] = {}
        for (run, _), seen in self.job_created.items():
            firsts[run] = min(seen, firsts.get(run, seen))
        return [firsts[run] - created for run, created in self.run_created.items() if run in firsts]

    def next_job_latencies(self, shape: Shape) -> list[float]:
        """The last step a step needs seen over (`step_ended`) -> the step's own Job seen created."""
        gaps = []
        for (run, step), created in self.job_created.items():
            needed = shape.needs().get(step) or ()
            done = [self.step_ended((run, need)) for need in needed]
            if needed and all(d is not None for d in done):
                gaps.append(created - max(d for d in done if d is not None))
        return gaps

    def job_controller_latencies(self) -> tuple[list[float], list[float]]:
        """What keeping a step's Job adds to each step (the operator's work for a Job it keeps, the Job controller's
        for one an earlier release made): (Job seen created -> its pod seen created, its pod seen Succeeded -> the
        Job seen Complete)."""
        to_pod, to_complete = [], []
        for key, name in self.job_names.items():
            if name in self.pod_created:
                to_pod.append(self.pod_created[name] - self.job_created[key])
            if name in self.pod_succeeded and key in self.job_completed:
                to_complete.append(self.job_completed[key] - self.pod_succeeded[name])
        return to_pod, to_complete


async def watch(api: KubeApi, path: str, handle: Any, stop: asyncio.Event) -> None:
    """Stream watch events of `path` into `handle(object)` until `stop` (re-watching from the last version)."""
    version = ""
    while not stop.is_set():
        query = {"watch": "true", "timeoutSeconds": "600", "allowWatchBookmarks": "true"}
        if version:
            query["resourceVersion"] = version
        response = await api.send("GET", path, query=query, accept="application/json",
                                  timeout=aiohttp.ClientTimeout(total=700))
        with contextlib.closing(response):
            async for line in _lines(response.content):
                event = json.loads(line)
                obj = event.get("object") or {}
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if event.get("type") in {"ADDED", "MODIFIED"}:
                    handle(obj)
                elif event.get("type") == "ERROR":
                    version = ""
                if stop.is_set():
                    return


async def _lines(stream: Any) -> AsyncIterator[bytes]:
    """Newline-separated documents of any size (aiohttp's own line iterator caps a line at 128 KiB)."""
    buffer = b""
    async for chunk in stream.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line


@contextlib.asynccontextmanager
async def watching(api: KubeApi, namespace: str, seen: Observations) -> Any:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(watch(api, JOBS.path(namespace), seen.saw_job, stop)),
             asyncio.create_task(watch(api, PODS.path(namespace), seen.saw_pod, stop)),
             asyncio.create_task(watch(api, WORKFLOW_RUNS.path(namespace), seen.saw_run, stop))]
    await asyncio.sleep(0.5)  # the watches are open before anything is created
    try:
        yield
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def create_runs(api: KubeApi, manifests: Iterable[JSON], seen: Observations, *, parallel: int = 16
                      ) -> dict[str, JSON]:
    """Create the runs `parallel` at a time; records when each create was answered."""
    gate = asyncio.Semaphore(parallel)
    created: dict[str, JSON] = {}

    async def one(manifest: JSON) -> None:
        async with gate:
            body, _ = await api.create(WORKFLOW_RUNS.path(manifest["metadata"]["namespace"]), manifest)
            seen.run_created[manifest["metadata"]["name"]] = time.monotonic()
            created[manifest["metadata"]["name"]] = body

    await asyncio.gather(*(one(m) for m in manifests))
    return created
