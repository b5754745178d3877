"""`kubectl towline watch RUN` and `logs -f RUN [STEP]`: a run followed as it happens, through watches.

Nothing here polls. A run is watched by name from the resourceVersion its
list answered with, and a follower of logs also watches the run's step pods:
each pod's log is streamed (follow=true) from the moment its container runs
until it exits, several at once when steps run in parallel, each line prefixed
with its step's id. A pod counts as the run's only if its controlling Job is
one the run's status names (only the operator writes status): a pod labelled
with the run by somebody else never passes for the run's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from towline.api.runterms import TERMINAL_RUN_PHASES
from towline.jsontypes import JSON
from towline.k8s import live
from towline.k8s.client import PODS, WORKFLOW_RUNS, ApiError, KubeApi
from towline.k8s.labels import LABEL_RUN, LABEL_STEP, identifier_label
from towline.k8s.owners import controlling_job

Print = Callable[[str], None]

_LOGGABLE = frozenset({"Running", "Succeeded", "Failed"})
"""Pod phases in which the step container has started, so the log API can serve it."""


def step_jobs(run: JSON) -> dict[str, tuple[str, int]]:
    """Job name -> (step id, attempt) for every Job the run's status names (current and earlier attempts)."""
    jobs: dict[str, tuple[str, int]] = {}
    for entry in (run.get("status") or {}).get("steps") or []:
        for record in entry.get("history") or []:
            if record.get("jobName"):
                jobs[record["jobName"]] = (entry["id"], int(record.get("attempt") or 0))
        if entry.get("jobName"):
            jobs[entry["jobName"]] = (entry["id"], int(entry.get("attempt") or 0))
    return jobs


def change_line(name: str, run: JSON) -> tuple[tuple[str, str], str]:
    """What `watch` shows of a run, and the (phase, current step) it shows it for."""
    status = run.get("status") or {}
    now = (str(status.get("phase") or "Pending"), str(status.get("currentStep") or ""))
    return now, f"{name}: {now[0]}" + (f" ({now[1]})" if now[1] else "")


async def watch_run(api: KubeApi, namespace: str, name: str, out: Print, err: Print) -> int:
    """Print each change of phase or current step until the run ends; 0 only if it succeeded."""
    seen: tuple[str, str] | None = None

    def show(run: JSON) -> None:
        nonlocal seen
        now, line = change_line(name, run)
        if now != seen:
            out(line)
            seen = now

    run = await run_until_it_ends(api, namespace, name, err, show)
    if run is None:
        return 1
    status = run.get("status") or {}
    if status.get("message") and status.get("phase") != "Succeeded":
        out(str(status["message"]))
    return 0 if status.get("phase") == "Succeeded" else 1


async def run_until_it_ends(
    api: KubeApi, namespace: str, name: str, err: Print, seen: Callable[[JSON], None] = lambda _: None,
) -> JSON | None:
    """The run as it ended (each version on the way goes to `seen`); None, said on `err`, if it went away.

    A watch on the one run (fieldSelector metadata.name), from the resourceVersion of its list;
    the watch is re-opened where it stopped and re-listed after 410 Gone.
    """
    found = False
    events = live.watch_objects(api, WORKFLOW_RUNS.path(namespace), field_selector=f"metadata.name={name}")
    async with contextlib.aclosing(events):
        async for kind, run in events:
            if kind == live.SYNCED:
                if not found:
                    err(f"run {name} is gone (no WorkflowRun {name!r} in namespace {namespace})")
                    return None
                continue
            if kind == "DELETED":
                err(f"run {name} was deleted")
                return None
            found = True
            seen(run)
            if (run.get("status") or {}).get("phase") in TERMINAL_RUN_PHASES:
                return run
    raise AssertionError("unreachable: a watch never ends by itself")


def prefix(step: str, attempt: int) -> str:
    return f"{step}: " if attempt <= 1 else f"{step} (attempt {attempt}): "


def loggable(run: JSON, pods: dict[str, JSON], started: set[str]) -> list[tuple[JSON, str]]:
    """The run's own pods whose step container has started and that are not followed yet, oldest first,
    each with the prefix its lines get."""
    jobs = step_jobs(run)
    ready = []
    for pod in sorted(pods.values(), key=lambda p: (p["metadata"].get("creationTimestamp") or "",
                                                    p["metadata"]["name"])):
        job = controlling_job(pod)
        phase = (pod.get("status") or {}).get("phase")
        if pod["metadata"]["name"] in started or job is None or job.name not in jobs or phase not in _LOGGABLE:
            continue
        ready.append((pod, prefix(*jobs[job.name])))
    return ready


async def _merged(*streams: AsyncIterator[tuple[str, JSON]]) -> AsyncGenerator[tuple[int, str, JSON], None]:
    """Events of several watches as they come, each tagged with its stream's index."""
    queue: asyncio.Queue[tuple[int, str, JSON] | BaseException] = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[tuple[str, JSON]]) -> None:
        try:
            async for kind, obj in stream:
                await queue.put((index, kind, obj))
        except Exception as error:  # handed to the reader, which raises it
            await queue.put(error)

    tasks = [asyncio.create_task(pump(index, stream)) for index, stream in enumerate(streams)]
    try:
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def follow_logs(api: KubeApi, namespace: str, name: str, step: str | None, *, out: Print, err: Print,
                      query: dict[str, str] | None = None) -> int:
    """Stream the logs of the run's step pods (or one step's) as they start, until the run has ended and
    every started pod's log has been read to its end. 0 when the run ended, whatever its result."""
    selector = f"{LABEL_RUN}={name}" + (f",{LABEL_STEP}={identifier_label(step)}" if step else "")
    run: JSON | None = None
    pods: dict[str, JSON] = {}
    started: set[str] = set()
    followers: list[asyncio.Task[None]] = []

    def start_followers() -> None:
        assert run is not None
        for pod, label in loggable(run, pods, started):
            pod_name = pod["metadata"]["name"]
            started.add(pod_name)
            # A pod that has finished has its whole log: it is read after the ones before it, so steps
            # that ran one after another are not interleaved; running pods stream at once, side by side.
            after = followers[-1] if followers and pod["status"]["phase"] != "Running" else None
            followers.append(asyncio.create_task(
                _stream(api, namespace, pod_name, label, out=out, err=err, after=after, query=query)))

    run_events = live.watch_objects(api, WORKFLOW_RUNS.path(namespace), field_selector=f"metadata.name={name}")
    pod_events = live.watch_objects(api, PODS.path(namespace), label_selector=selector)
    events = _merged(run_events, pod_events)
    try:
        async for source, kind, obj in events:
            if source == 0:
                if (kind == live.SYNCED and run is None) or kind == "DELETED":
                    err(f"run {name} is gone (no WorkflowRun {name!r} in namespace {namespace})")
                    return 1
                if kind == live.SYNCED:
                    continue
                run = obj
            elif kind == "DELETED":
                pods.pop(obj["metadata"]["name"], None)
            elif kind != live.SYNCED:
                pods[obj["metadata"]["name"]] = obj
            if run is None:
                continue
            start_followers()
            if ((run.get("status") or {}).get("phase") or "Pending") in TERMINAL_RUN_PHASES:
                break
        # The run has ended: a pod that ran and finished between two events is read now, from a fresh list.
        assert run is not None
        pods = {pod["metadata"]["name"]: pod for pod in await api.list(PODS.path(namespace), label_selector=selector)}
        start_followers()
        await asyncio.gather(*followers)
    finally:
        await events.aclose()
        for task in followers:
            task.cancel()
    phase = (run.get("status") or {}).get("phase")
    err(f"run {name} {phase}")
    return 0


async def _stream(
    api: KubeApi, namespace: str, pod: str, label: str, *, out: Print, err: Print, after: asyncio.Task[None] | None,
    query: dict[str, str] | None = None,
) -> None:
    if after is not None:
        await asyncio.wait([after])
    try:
        async for line in live.follow_log(api, PODS.path(namespace, pod, "log"), query):
            out(label + line)
    except ApiError as error:
        err(f"{label}logs of pod {pod} are not available from the API server ({error.status}: {error.message})")
