"""The archive process: it follows runs, approvals and step pods and writes each into the record once.

- A step pod's log is read when the pod ends (capped, `log_cap_bytes` a container, counted when cut), while the pod
  is still there: the run's finalizer keeps its Jobs and pods from the history limit, and the archive reads the log
  long before a Job's TTL (a day by default) could take it.
- An approval is written when it is decided (or expires, or is cancelled): a run that waits for weeks has its
  decisions in the record before it ends.
- A run is written when it ends (or when somebody deletes it before it ended), after its logs and approvals, with
  the digests of its log records; then the archive removes the run's finalizer (`towline.dev/archive`), which the
  operator put there on the run's first pass: only now may the history limit or a person delete it.

One writer: every append goes through one queue, in order, so a namespace's chain grows one record at a time. What
the archive has written it finds again in the store after a restart (appends are idempotent by object UID), so a
restart or a second look writes nothing twice. Reads of the API server are the streams' (list, then watch); the
process adds a log read per container that ended, a patch per step Job (its TTL, once its pod's logs are written:
towline.archive.jobttl) and a patch per run.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from towline.archive.capture import (
    Capture,
    approval_capture,
    approval_decided,
    log_capture,
    log_key,
    pod_containers,
    run_capture,
    run_deleting,
    run_finished,
    run_finished_at,
)
from towline.archive.jobttl import job_ttl_patch
from towline.archive.pending import (
    APPROVALS_BY_RUN,
    PODS_BY_RUN,
    ArchiveState,
    Key,
    name_of,
    namespace_of,
    side_by_side,
    uid_of,
)
from towline.archive.records import Appended, Entry
from towline.archive.store import ArchiveStore
from towline.jsontypes import JSON
from towline.k8s.client import APPROVALS, JOBS, PODS, WORKFLOW_RUNS, ApiError, Conflict, KubeApi
from towline.k8s.indexer import Store, object_key
from towline.k8s.labels import LABEL_RUN, LABEL_STEP_POD, RUN_ARCHIVE_FINALIZER
from towline.k8s.owners import controlling_job
from towline.k8s.podphase import pod_ended
from towline.k8s.streams import FAILED, SYNCED, follow, scopes

log = logging.getLogger("towline.archive")


LOG_CAP_BYTES = 256 * 1024
"""Of each step container's log kept by default (the chart's archive.logCapBytes)."""
JOB_TTL_SECONDS = 86400
"""Set on a step Job once its pod's logs are written, by default (the chart's runner.jobTTLSecondsAfterFinished)."""
RETRY_SECONDS = (1.0, 60.0)
"""First and longest wait before a record that could not be written is tried again (database or API down)."""
POD_BATCH = 32
"""Ended pods among the next items the writer takes together (their logs read side by side)."""
POD_WAIT_SECONDS = 120.0
"""How long a finished run waits for a step pod that has not ended yet (the operator stops it at the deadline)
before the run is written without that pod's log, which the record then says."""


Call = Callable[[], Any]


class ArchiveService:
    """The archive's follower and writer (see the module docstring)."""

    def __init__(self, api: KubeApi, store: ArchiveStore, *, namespaces: tuple[str, ...] = (),
                 log_cap_bytes: int = LOG_CAP_BYTES, job_ttl_seconds: int = JOB_TTL_SECONDS,
                 clock: Callable[[], datetime] | None = None,
                 database: Callable[[Call], Awaitable[Any]] | None = None) -> None:
        self.api = api
        self.store = store
        self.namespaces = namespaces
        self.log_cap_bytes = log_cap_bytes
        self.job_ttl_seconds = job_ttl_seconds
        self.clock = clock or (lambda: datetime.now(UTC))
        self.state = ArchiveState()
        self._database = database
        self.written: dict[str, int] = defaultdict(int)
        """Records appended by kind (not counting those found archived already)."""
        self.logs_cut = 0
        self.lags: list[float] = []
        """Seconds from a run's end to its record, since the metrics last took them."""

    async def db(self, call: Call) -> Any:
        """Run a store call where the store lives (its own thread: sqlite3 connections stay on one thread)."""
        if self._database is None:
            return call()
        return await self._database(call)

    # The streams' sinks: they only note what changed; the writer does the work.
    def on_run(self, event: str, body: JSON) -> None:
        self._note(event, body, self.state.runs, "run", lambda run: run_finished(run) or run_deleting(run))

    def on_approval(self, event: str, body: JSON) -> None:
        self._note(event, body, self.state.approvals, "approval", approval_decided)

    def on_pod(self, event: str, body: JSON) -> None:
        if event == "DELETED":
            self.state.timed_pods.discard(uid_of(body))
            self.state.logged.pop(uid_of(body), None)
        self._note(event, body, self.state.pods, "pod", pod_ended)

    def _note(self, event: str, body: JSON, store: Store[Key, JSON], what: str, due: Callable[[JSON], bool]) -> None:
        """Keep `store` as the stream shows it; once `due` says the object is ready, the writer wants its record."""
        if event in (SYNCED, FAILED):
            return
        key = object_key(body)
        if event == "DELETED":
            store.pop(key)
            return
        store.put(key, body)
        if due(body):
            self.state.want(what, *key)

    async def serve(self) -> None:
        """Follow the three kinds and write what they show, until cancelled."""
        streams = []
        for number, (scope, wanted) in enumerate(scopes(self.namespaces)):
            streams += [
                follow(self.api, WORKFLOW_RUNS, scope, self._listed(f"runs {number}", self.on_run),
                       what="WorkflowRun", wanted=wanted),
                follow(self.api, APPROVALS, scope, self._listed(f"approvals {number}", self.on_approval),
                       what="Approval", wanted=wanted),
                follow(self.api, PODS, scope, self._listed(f"pods {number}", self.on_pod), what="step pod",
                       wanted=wanted, label_selector=f"{LABEL_RUN},{LABEL_STEP_POD}"),
            ]
        await asyncio.gather(*streams, self.write_forever())

    def _listed(self, stream: str, sink: Callable[[str, JSON], None]) -> Callable[[str, JSON], None]:
        """`sink`, noting when this stream's first list has ended."""
        self.state.unsynced.add(stream)

        def take(event: str, body: JSON) -> None:
            if event == SYNCED and stream in self.state.unsynced:
                self.state.unsynced.discard(stream)
                self.state.wake.set()
            sink(event, body)

        return take

    async def write_forever(self) -> None:
        delay = RETRY_SECONDS[0]
        while True:
            await self.state.wake.wait()
            self.state.wake.clear()
            if self.state.unsynced:
                continue
            while self.state.pending:
                batch = self.next_batch()
                for item in batch:
                    del self.state.pending[item]  # an event meanwhile adds it again: it is looked at once more
                try:
                    done = await (self.write_pods(batch) if len(batch) > 1 else self.write(*batch[0]))
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # the writer outlives any failure: the items wait and are tried again
                    for item in batch:
                        self.state.pending[item] = None
                    log.warning("archiving %s %s/%s%s failed (%s: %s); trying again in %.0f s", *batch[0],
                                f" and {len(batch) - 1} more" if len(batch) > 1 else "", type(error).__name__,
                                error, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_SECONDS[1])
                    continue
                delay = RETRY_SECONDS[0]
                if not done:  # not yet: looked at again after the others
                    self.state.pending[batch[0]] = None
                    await asyncio.sleep(1.0)

    def next_batch(self) -> list[tuple[str, str, str]]:
        """The ended pods among the next POD_BATCH items (read side by side), or else the next item alone."""
        window = list(itertools.islice(self.state.pending, POD_BATCH))
        pods = [item for item in window if item[0] == "pod"]
        return pods if len(pods) > 1 else window[:1]

    async def write_pods(self, items: list[tuple[str, str, str]]) -> bool:
        """Ended pods' logs, read side by side and appended in order."""
        await self.archive_pods([pod for _, namespace, name in items if (pod := self._pod(namespace, name))])
        return True

    async def write(self, what: str, namespace: str, name: str) -> bool:
        """Write one item; False: it must wait (a finished run's pod has not ended yet)."""
        if what == "pod":
            pod = self._pod(namespace, name)
            if pod is not None:
                await self.archive_pods([pod])
            return True
        if what == "approval":
            approval = self._approval(namespace, name)
            if approval is not None and approval_decided(approval):
                await self.append(namespace, approval_capture(approval))
            return True
        run = self.state.runs.get((namespace, name))
        if run is None:
            return True
        return await self.archive_run(run)

    def _pod(self, namespace: str, name: str) -> JSON | None:
        return self.state.pods.get((namespace, name))

    def _approval(self, namespace: str, name: str) -> JSON | None:
        return self.state.approvals.get((namespace, name))

    async def append(self, namespace: str, capture: Capture) -> Entry:
        now = self.clock()
        appended: Appended = await self.db(lambda: self.store.append(
            namespace, capture.kind, capture.key, capture.body, index=capture.index, recorded_at=now))
        if appended.created:
            self.written[capture.kind] += 1
        return appended.entry

    def take_lags(self) -> list[float]:
        lags, self.lags = self.lags, []
        return lags

    async def archive_pods(self, pods: list[JSON]) -> list[JSON]:
        """Every container log of these ended step pods, each once: read side by side (AT_ONCE), appended one at a
        time in order, then their Jobs' TTLs set side by side. The references of their log records, in pod order,
        for the runs' records."""
        todo = [pod for pod in pods if uid_of(pod) not in self.state.logged]
        archived = await self._archived_logs(todo)
        wanted = [(pod, container) for pod in todo for container in pod_containers(pod)
                  if (namespace_of(pod), log_key(pod, container)) not in archived]
        texts = await side_by_side([partial(self.read_log, namespace_of(pod), name_of(pod), container)
                                     for pod, container in wanted])
        read = {(uid_of(pod), container): text for (pod, container), text in zip(wanted, texts, strict=True)}
        for pod in todo:
            references = []
            for container in pod_containers(pod):
                entry = archived.get((namespace_of(pod), log_key(pod, container)))
                if entry is None:
                    capture = log_capture(pod, self._run_uid(pod), container, read[(uid_of(pod), container)],
                                          cap=self.log_cap_bytes)
                    self.logs_cut += bool(capture.body["truncated"])
                    entry = await self.append(namespace_of(pod), capture)
                body = entry.body
                references.append({"key": entry.key, "digest": entry.digest, "step": body.get("step"),
                                   "attempt": body.get("attempt"), "container": container,
                                   "truncated": body.get("truncated")})
            self.state.logged[uid_of(pod)] = references
        untimed = [pod for pod in pods if uid_of(pod) not in self.state.timed_pods]
        failures = await side_by_side([partial(self._job_ttl_or_error, pod) for pod in untimed])
        for failure in failures:
            if failure is not None:
                raise failure
        return [reference for pod in pods for reference in self.state.logged.get(uid_of(pod), [])]

    async def _archived_logs(self, pods: list[JSON]) -> dict[tuple[str, str], Entry]:
        """The log records already in the record for these pods' runs (after a restart), by (namespace, key):
        one read of the database per run."""
        runs = {(namespace_of(pod), run_uid) for pod in pods if (run_uid := self._run_uid(pod))}
        archived: dict[tuple[str, str], Entry] = {}
        for namespace, run_uid in sorted(runs):
            for entry in await self.db(partial(self.store.logs, namespace, run_uid)):
                archived[(namespace, entry.key)] = entry
        return archived

    def _run_uid(self, pod: JSON) -> str:
        run_name = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_RUN, "")
        run = self.state.runs.get((namespace_of(pod), run_name)) or {}
        return str((run.get("metadata") or {}).get("uid") or "")

    async def _job_ttl_or_error(self, pod: JSON) -> Exception | None:
        """`set_job_ttl`, its failure returned: every pod of a batch is tried before one failure is raised."""
        try:
            await self.set_job_ttl(pod)
        except ApiError as error:
            return error
        return None

    async def set_job_ttl(self, pod: JSON) -> None:
        """The pod's logs are in the record: its Job may go after its TTL now (one PATCH per Job)."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        job = controlling_job(pod)
        if job is None or uid in self.state.timed_pods:
            return
        try:
            await self.api.merge_patch(JOBS.path(job.namespace, job.name), job_ttl_patch(job, self.job_ttl_seconds))
        except Conflict:
            pass  # another Job of that name now: not this pod's
        except ApiError as error:
            if error.status in (403, 422):
                # A Job an earlier operator made with its TTL keeps that TTL (towline-step-objects refuses
                # another value): nothing to do. Anything else refused is said, not retried forever.
                log.info("the TTL of Job %s/%s was not set (%s); it keeps what it has", job.namespace, job.name,
                         error)
            elif error.status != 404:  # a Job gone is a Job that needs no TTL
                raise
        self.state.timed_pods.add(uid)

    async def read_log(self, namespace: str, pod: str, container: str) -> str:
        """The container's log, at most one byte past the cap (so a cut is known); empty if it never started."""
        try:
            return await self.api.read_text(PODS.path(namespace, pod, "log"),
                                            query={"container": container, "limitBytes": str(self.log_cap_bytes + 1)})
        except ApiError as error:
            if error.status in (400, 404):  # a container that never started has no log; a pod gone has none left
                return ""
            raise

    async def archive_run(self, run: JSON) -> bool:
        """The run's logs, approvals and record, then its finalizer removed; False: a pod has not ended yet."""
        meta = run["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        archived = await self.db(lambda: self.store.run(namespace, uid))
        if archived is None or archived.uid != uid:
            pods = [pod for _, pod in self.state.pods.by(PODS_BY_RUN, (namespace, name))]
            waiting = [p for p in pods if not pod_ended(p) and not (p.get("metadata") or {}).get("deletionTimestamp")]
            if waiting and run_finished(run) and not self._waited_long_enough(run):
                return False
            references = await self.archive_pods([pod for pod in pods if pod_ended(pod)])
            approvals = [approval for _, approval in self.state.approvals.by(APPROVALS_BY_RUN, (namespace, name))]
            for approval in approvals:
                if approval_decided(approval):
                    await self.append(namespace, approval_capture(approval))
            now = self.clock()
            await self.append(namespace, run_capture(run, approvals, references, now))
            finished = run_finished_at(run)
            if finished is not None:
                self.lags.append((now - finished).total_seconds())
        await self.release(run)
        return True

    def _waited_long_enough(self, run: JSON) -> bool:
        finished = run_finished_at(run)
        return finished is None or (self.clock() - finished).total_seconds() >= POD_WAIT_SECONDS

    async def release(self, run: JSON) -> None:
        """Remove the archive's finalizer (others stay); the patch names the resourceVersion it read."""
        meta = run["metadata"]
        held = list(meta.get("finalizers") or [])
        if RUN_ARCHIVE_FINALIZER not in held:
            return
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"],
                              "finalizers": [f for f in held if f != RUN_ARCHIVE_FINALIZER]}}
        try:
            await self.api.merge_patch(WORKFLOW_RUNS.path(meta["namespace"], meta["name"]), patch)
        except Conflict:
            fresh = await self.api.get(WORKFLOW_RUNS.path(meta["namespace"], meta["name"]))
            if fresh is not None:
                await self.release(fresh)
        except ApiError as error:
            if error.status != 404:
                raise

