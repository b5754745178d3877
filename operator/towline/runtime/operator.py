"""One operator process, the manager: its queues, its Leases, what it remembers of runs, and its workers.

It builds each reconciler's dependencies once (towline.handlers.context: `RunDeps`,
`WorkflowDeps`, `StepTypeDeps`) and hands them in. Every replica watches and keeps
its queues filled; only the holder of a namespace's shard Lease (with one
shard, the single Lease) reconciles there and fires its schedules
(towline.k8s.shards). A reconcile runs only while this replica holds the key's
shard: it is cancelled when that shard's renew deadline passes, and every write
it makes goes through an API view that refuses a write to a namespace whose
shard is not held, so a replica that was paused and resumes mid-pass cannot act
after another replica took over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from towline.eventsink import EventSink
from towline.handlers.context import ArchiveHold, Definitions, Key, RunDeps, StepTypeDeps, WorkflowDeps
from towline.handlers.failures import report_reconcile_failure
from towline.handlers.runs import reconcile_run
from towline.handlers.steptypes import reconcile_step_type
from towline.handlers.workflows import reconcile_workflow
from towline.k8s.actions import ActionContext, DefaultDenyPolicies
from towline.k8s.apiserver import except_in_step_policies, read_api_server_addresses
from towline.k8s.client import KubeApi, WriteFenced
from towline.k8s.deadletters import ConfigMapDeadLetters
from towline.k8s.labels import RUN_ARCHIVE_FINALIZER
from towline.k8s.shards import ShardElectors
from towline.runtime import metrics
from towline.runtime.apiserver import ApiServerAddresses
from towline.runtime.childwatch import ChildEvents, watch_children
from towline.runtime.clock import SYSTEM_CLOCK, Clock
from towline.runtime.config import OperatorConfig
from towline.runtime.reconcilers import RememberedRuns, WatchedChildren
from towline.runtime.runstore import RunStore, RunSummary
from towline.runtime.runwatch import RunEvents, watch_runs
from towline.runtime.steptypes import StepTypeCache
from towline.runtime.workqueue import WorkQueue
from towline.tracing import span_sink
from towline.validation.catalog import connector_catalog
from towline.validation.steptypes import check_step_type

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 10
"""How long a graceful stop waits for the passes to end before it hands the Lease over regardless."""
CHILD_BATCH_SECONDS = 0.5
WIDE_RUN_JOBS = 16
WIDE_RUN_BATCH_SECONDS = 2.0
"""How long a pass waits for more of a run's steps to end while others still run (see `child_changed`)."""
REPLAY_POLL_SECONDS = 5.0
"""How often the events sink looks for dead letters an admin asked to replay (one GET of one ConfigMap)."""


@dataclass
class Operator:
    config: OperatorConfig
    connection: KubeApi
    """The unfenced connection: the Lease and closing use it; reconciles use `api`."""
    clock: Clock = SYSTEM_CLOCK
    """What schedules fire by (the Workflow queue and pass); runs and the Lease keep the machine's clock."""
    runs: WorkQueue = field(default_factory=lambda: WorkQueue("runs"))
    workflows: WorkQueue = field(init=False)
    step_type_queue: WorkQueue = field(default_factory=lambda: WorkQueue("steptypes"))
    known: RunStore = field(default_factory=RunStore)
    """What the watches showed of runs and their children (towline.runtime.runstore)."""
    workflow_keys: set[Key] = field(default_factory=set)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _watches: KubeApi | None = None
    """The connection of the run and child watches (towline.runtime.runwatch, childwatch), apart from the passes'
    requests."""
    _stopping: asyncio.Future[None] | None = None
    """The one graceful stop, begun by a signal (towline.runtime.serve) or kopf's cleanup, whichever comes first."""

    def __post_init__(self) -> None:
        self.workflows = WorkQueue("workflows", clock=self.clock.monotonic, wall_clock=self.clock.now)
        self.runs.max_retries = self.workflows.max_retries = self.config.max_retries
        self.step_type_queue.max_retries = self.config.max_retries
        catalog = connector_catalog()
        self.step_types = StepTypeCache(self.config.step_image_policy)
        self.shards = ShardElectors(
            self.connection, namespace=self.config.namespace, base_name=self.config.lease_name,
            identity=self.config.identity, shards=self.config.shards, replicas=self.config.replicas,
            timings=self.config.leader_timings,
        )
        self.api = self.connection.fenced(self.shards.may_write)
        """What reconciles write through: refuses a write to a namespace whose shard this replica does not hold."""
        self.children = WatchedChildren(self.api, self.known.children)
        self.api_server = ApiServerAddresses(lambda: read_api_server_addresses(self.connection),
                                             changed=self._except_in_running_steps)
        self.action_context = ActionContext(
            api=self.api, pod_settings=self.config.pod_settings, catalog=catalog,
            remember=self.children.learned, api_server_networks=self.api_server.networks,
            default_deny=DefaultDenyPolicies(),
        )
        # Each reconciler's dependencies, built once: its client, its lookups, a clock and the catalog.
        policy = self.config.step_image_policy
        definitions = Definitions(catalog=catalog, code_steps=self.config.code_steps,
                                  step_types_for=self.step_types.available,
                                  check_step_type=lambda body: check_step_type(body, policy))
        archive = self.config.archive
        self.spans = span_sink(self.config.tracing)
        self.events = None if self.config.events.url is None else EventSink(
            self.config.events, ConfigMapDeadLetters(self.connection, self.config.namespace),
            refused=self.api_server.networks)
        self.run_deps = RunDeps(
            api=self.api, actions=self.action_context, definitions=definitions, runs=self.known,
            memory=RememberedRuns(self.known, self.runs.add), children=self.children,
            archive=ArchiveHold(finalizer=RUN_ARCHIVE_FINALIZER if archive else None,
                                max_runs_awaiting=self.config.archive_max_runs_awaiting if archive else 0),
            now=SYSTEM_CLOCK.now, decided=self._decided_run, finished=self.on_run_finished,
            web_view_url=self.config.web_view_url, spans=self.spans, events=self.events,
        )
        self.workflow_deps = WorkflowDeps(
            api=self.api, definitions=definitions, runs=self.known, now=self.clock.now, creator=self.identity_user,
            wake_queued_runs=self.wake_queued_runs, requeue=self.workflows.add,
        )
        self.step_type_deps = StepTypeDeps(api=self.api, check_step_type=definitions.check_step_type,
                                           requeue=self.step_type_queue.add, now=SYSTEM_CLOCK.now)

    # What kopf's wiring and the metrics server ask of the manager
    def saw_workflow(self, key: Key, *, deleted: bool) -> None:
        """A Workflow changed (its pass validates it, fires its schedules, trims its history) or went."""
        if deleted:
            self.workflow_keys.discard(key)
            self.workflows.forget(key)
            self.workflows.add(key)  # one pass, which finds it gone and has its callers judged again
            return
        self.workflow_keys.add(key)
        self.workflows.add(key)

    def saw_step_type(self, body: dict[str, Any], *, deleted: bool) -> None:
        """A type changed or went: report on it, and validate again every Workflow that may name it."""
        key = self.step_types.saw(body, deleted=deleted)
        namespace = key[0]
        if not deleted:
            self.step_type_queue.add(key)
        for workflow in list(self.workflow_keys):
            if not namespace or workflow[0] == namespace:
                self.workflows.add(workflow)

    def run_summaries(self) -> list[tuple[str, RunSummary]]:
        """(namespace, summary) of every run the watch shows. Called on the metrics server's thread while the loop
        adds runs, so copied in one step (list() of a dict view runs without releasing the GIL)."""
        return [(namespace, summary) for (namespace, _), summary in self.known.summaries.items()]

    @property
    def holds_any_shard(self) -> bool:
        return self.shards.any_held

    def now(self) -> datetime:
        return self.clock.now()

    @property
    def identity_user(self) -> str:
        return f"system:serviceaccount:{self.config.namespace}:{self.config.service_account}"

    def wake_queued_runs(self, namespace: str, workflow: str) -> None:
        for key in self.known.queued(namespace, workflow):
            self.runs.add(key)

    def _decided_run(self, key: Key, phase: str) -> None:
        shard = self.shards.shard_of(key[0])
        metrics.SHARD_RUNS_DECIDED.labels(str(shard)).inc()
        log.info("%s/%s: decided %s (shard %d of %d, %s)", *key, phase, shard, self.shards.count,
                 self.config.identity)

    async def on_run_finished(self, run: dict[str, Any]) -> None:
        """Queue the workflow's pass: it trims the history and refreshes lastRun with the run's final phase."""
        namespace = run["metadata"]["namespace"]
        workflow = run["spec"]["workflowRef"]["name"]
        key = (namespace, run["metadata"]["name"])
        if key in self.known.summaries:
            # The watch event with the final status may not have arrived yet; lastRun must not lag,
            # and the runs queued behind it must not count it as running.
            self.saw_run(key, run)
        self.wake_queued_runs(namespace, workflow)
        self.workflows.add((namespace, workflow))

    async def _except_in_running_steps(self, networks: tuple[str, ...]) -> None:
        """The API server moved: each shard's holder carves its new addresses out of running steps' policies."""
        for namespace, run in self.known.in_flight():
            if self.shards.holds(namespace):  # else that shard's holder does
                await except_in_step_policies(self.api, namespace, run, networks)

    # Watch events
    def saw_run(self, key: Key, body: dict[str, Any]) -> bool:
        """Record a watch event of a run; whether it needs a pass.

        The echo of this process's own status write does not: the pass that wrote it decided on everything
        it shows, and a decision that leaves work for the pass after its write says so itself (its
        `wake_at`, `tests/unit/engine/test_engine_properties.py`). For a 50-step run that pass cost a
        whole decide, observation and dump of its status, once per write (docs/benchmarks.md).
        """
        echo = self.known.own_echo(key, body)
        before = self.known.summaries.get(key)
        summary = self.known.saw(key, body)
        if summary is not None:
            # Finished by a pass of another replica (or seen before this one's own report): a slot is free.
            self.wake_queued_runs(key[0], summary.workflow)
        after = self.known.summaries.get(key)
        if before is not None and before.awaiting_archive and not (after is not None and after.awaiting_archive):
            self._archive_released(key[0])
        parent = _parent_run(body)
        if parent is not None:  # a subflow's child changed (its own pass's write included): its parent looks
            self.runs.add((key[0], parent))
        return not echo

    def _archive_released(self, namespace: str) -> None:
        """A run of the namespace left the archive's backlog: runs held by archive.maxRunsAwaiting may start."""
        if self.run_deps.archive.max_runs_awaiting:
            for key in self.known.pending_in(namespace):
                self.runs.add(key)

    def wants_children(self, key: Key) -> bool:
        return self.known.wants_children(key)

    def child_changed(self, key: Key) -> None:
        """One of the run's Jobs changed state (or appeared, or went).

        While other Jobs of the run still run (a fan-out), the pass waits up to CHILD_BATCH_SECONDS for the
        next ones to end, and they share it; when none does (a chain's step, a fan-out's last), the pass is
        queued at once. A pass of a large run decides, dumps and writes all of its status, so one pass per
        ending step was most of a fan-out's CPU per step (docs/benchmarks.md). While WIDE_RUN_JOBS or more
        still run, it waits up to WIDE_RUN_BATCH_SECONDS: such a run's steps end many to a second, and each
        of its status writes is the largest (Argo's controller looks at a workflow 1 s after a pod changed).
        """
        active = self.known.children.active_jobs(key, at_most=WIDE_RUN_JOBS)
        if active == 0:
            self.runs.add(key)
        else:
            self.runs.add_within(key, WIDE_RUN_BATCH_SECONDS if active >= WIDE_RUN_JOBS else CHILD_BATCH_SECONDS)

    def forgot_run(self, key: Key) -> None:
        summary = self.known.forgot(key)
        if summary is not None and not summary.finished:
            self.wake_queued_runs(key[0], summary.workflow)  # deleted before it finished: its slot is free
        if summary is not None and summary.awaiting_archive:
            self._archive_released(key[0])
        self.runs.forget(key)

    # Lifecycle
    async def start(self) -> None:
        await self.api_server.refresh()  # before any step could start; retried in the background if it fails
        if self._stopping is not None:
            return  # stopped while it started: nothing may take a Lease that no stop would hand over
        self.tasks.append(asyncio.create_task(self.api_server.run(), name="api-server-addresses"))
        self.tasks.append(asyncio.create_task(self.shards.run(), name="leader"))
        self._watches = self.connection.separate()
        events = ChildEvents(self.known.children, self.action_context.default_deny, self.wants_children,
                             self.child_changed, self.known.is_in_flight)
        self.tasks.append(asyncio.create_task(
            watch_children(self._watches, self.config.watch_namespaces, events), name="child-watches"))
        runs = RunEvents(self.saw_run, self.forgot_run, self.runs.add, lambda: self.known.summaries)
        self.tasks.append(asyncio.create_task(
            watch_runs(self._watches, self.config.watch_namespaces, runs), name="run-watch"))
        self.tasks.append(asyncio.create_task(self.runs.run_delayed(), name="runs-delayed"))
        self.tasks.append(asyncio.create_task(self.workflows.run_delayed(), name="workflows-delayed"))
        self.tasks.append(asyncio.create_task(self.step_type_queue.run_delayed(), name="steptypes-delayed"))
        self.tasks.append(asyncio.create_task(
            self.step_type_queue.run_worker(self._leading(self._reconcile_step_type), self._give_up_step_type),
            name="steptype-worker"))
        for index in range(self.config.workers):
            self.tasks.append(asyncio.create_task(
                self.runs.run_worker(self._leading(self._reconcile_run), self._give_up_run),
                name=f"run-worker-{index}"))
        self.tasks.append(asyncio.create_task(
            self.workflows.run_worker(self._leading(self._reconcile_workflow), self._give_up_workflow),
            name="wf-worker"))
        for index in range(self.shards.count):
            metrics.SHARD_HELD.labels(str(index)).set(0)
            self.tasks.append(asyncio.create_task(self._requeue_on_leadership(index), name=f"shard-{index}"))
        self.tasks.append(asyncio.create_task(self._recheck_when_the_clock_moves(), name="clock-moved"))
        if self.events is not None:
            self.tasks.append(asyncio.create_task(self.events.run(), name="events-sink"))
            self.tasks.append(asyncio.create_task(self.events.replays(REPLAY_POLL_SECONDS), name="events-replays"))

    async def stop(self) -> None:
        """A graceful stop: end every reconcile first, then hand the Lease over for a replacement to take at once.
        Once, however often asked: a signal begins it, kopf's cleanup waits for it (shielded: kopf cancelling its
        cleanup does not cut the hand-over short)."""
        await asyncio.shield(self.begin_stop())

    def begin_stop(self) -> asyncio.Future[None]:
        """Start the graceful stop, if not yet begun (a signal handler cannot await); the stop under way."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        return self._stopping

    async def _stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        if self.tasks:
            _, stuck = await asyncio.wait(self.tasks, timeout=STOP_GRACE_SECONDS)
            if stuck:  # the Lease is handed over all the same: the fenced connection refuses their writes after
                log.warning("%d tasks had not ended %d s after the stop: %s", len(stuck), STOP_GRACE_SECONDS,
                            ", ".join(sorted(task.get_name() for task in stuck)))
        if self._watches is not None:
            await self._watches.close()
        await self.shards.release()
        await self.connection.close()
        if self.events is not None and (left := self.events.unsent()):
            log.warning("%d events were still queued for the events sink at the stop: not sent", left)
        if self.spans is not None:  # the spans still queued, sent within the exporter's timeout
            await asyncio.to_thread(self.spans.shutdown)

    def _leading(self, process: Callable[[Key], Awaitable[None]]) -> Callable[[Key], Awaitable[None]]:
        """Only the holder of the key's shard acts; others re-queue the shard's keys when they take it over."""

        async def guarded(key: Key) -> None:
            if not self.shards.holds(key[0]):
                return
            try:
                await self._while_leading(key[0], process(key))
            except WriteFenced as refused:
                log.warning("%s/%s: %s; the new leader takes over", *key, refused)

        return guarded

    async def _while_leading(self, namespace: str, work: Awaitable[None]) -> None:
        """Run `work`, cancelling it as soon as the renew deadline of the namespace's shard passes."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=max(0.05, self.shards.seconds_left(namespace)))
                if done:
                    return task.result()
                if not self.shards.holds(namespace):
                    log.warning("lost the Lease during a pass; cancelling it")
                    task.cancel()
                    await asyncio.wait({task})  # its end, not its outcome: a stop cancelling this still ends it
                    return None
        finally:
            task.cancel()

    async def _requeue_on_leadership(self, shard: int) -> None:
        elector = self.shards.electors[shard]
        while True:
            await elector.became_leader.wait()
            log.info("holding shard %d of %d", shard, self.shards.count)
            metrics.SHARD_HELD.labels(str(shard)).set(1)
            mine = self.shards.shard_of
            for key in self.known.summaries:
                if mine(key[0]) == shard:
                    self.runs.add(key)
            for key in list(self.workflow_keys):
                if mine(key[0]) == shard:
                    self.workflows.add(key)
            for key in self.step_types.type_keys():
                if mine(key[0]) == shard:
                    self.step_type_queue.add(key)
            await elector.lost_leadership.wait()
            log.info("no longer holding shard %d of %d", shard, self.shards.count)
            metrics.SHARD_HELD.labels(str(shard)).set(0)

    async def _recheck_when_the_clock_moves(self) -> None:
        """A jump forward may make delayed Workflow passes (a schedule's next slot) due now."""
        while True:
            await self.clock.moved()
            self.workflows.recheck()

    async def _reconcile_run(self, key: Key) -> None:
        wake_at = await reconcile_run(self.run_deps, *key)
        if wake_at is not None:
            self.runs.add_at(key, wake_at)
        elif not self.known.is_in_flight(key):
            self.runs.drop_delayed(key)  # finished or gone: the looks its earlier passes asked for find nothing

    async def _reconcile_workflow(self, key: Key) -> None:
        wake_at = await reconcile_workflow(self.workflow_deps, *key)
        if wake_at is not None:
            self.workflows.add_at(key, wake_at)

    async def _reconcile_step_type(self, key: Key) -> None:
        await reconcile_step_type(self.step_type_deps, *key)

    async def _give_up_step_type(self, key: Key, attempts: int, error: BaseException) -> None:
        log.error("step type %s/%s: %d passes failed, the last with %s: %s", *key, attempts, type(error).__name__,
                  error)

    async def _give_up_run(self, key: Key, attempts: int, error: BaseException) -> None:
        if self.shards.holds(key[0]):
            await report_reconcile_failure(self.run_deps, *key, attempts, error)

    async def _give_up_workflow(self, key: Key, attempts: int, error: BaseException) -> None:
        log.error("workflow %s/%s: %d passes failed, the last with %s: %s", *key, attempts, type(error).__name__, error)


def _parent_run(body: dict[str, Any]) -> str | None:
    """The parent run's name of a subflow's child run (trigger type parent); None for any other run."""
    trigger = (body.get("spec") or {}).get("trigger") or {}
    parent = trigger.get("parent") if trigger.get("type") == "parent" else None
    name = parent.get("run") if isinstance(parent, dict) else None
    return name if isinstance(name, str) and name else None
