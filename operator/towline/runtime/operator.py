"""One operator process: its queues, its Lease, what it remembers of runs, and its workers.

Implements the handlers' `ReconcileContext`. Every replica watches and keeps
its queues filled; only the Lease holder reconciles and fires schedules. A
reconcile runs only while this replica leads: it is cancelled when the renew
deadline passes, and every write it makes goes through an API view that
refuses writes once the deadline has passed, so a replica that was paused and
resumes mid-pass cannot act after another replica took over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from towline.api.run import WorkflowRunStatus
from towline.api.steptype import ResolvedStepType
from towline.api.workflow import LastRun
from towline.engine import TERMINAL_RUN_PHASES, RunInLine
from towline.engine.observed import Observed
from towline.handlers.context import Key
from towline.handlers.failures import report_reconcile_failure
from towline.handlers.history import FinishedRun, kept_until
from towline.handlers.runs import reconcile_run
from towline.handlers.steptypes import reconcile_step_type
from towline.handlers.workflows import reconcile_workflow
from towline.k8s.actions import ActionContext, DefaultDenyPolicies
from towline.k8s.apiserver import except_in_step_policies, read_api_server_addresses
from towline.k8s.client import KubeApi, WriteFenced
from towline.k8s.leader import LeaderElector
from towline.k8s.observe import build_observed, list_children
from towline.metrics import next_gate_expiry, open_approval_gates
from towline.runtime import metrics
from towline.runtime.apiserver import ApiServerAddresses
from towline.runtime.cache import ChildCache
from towline.runtime.childwatch import ChildEvents, watch_children
from towline.runtime.clock import SYSTEM_CLOCK, Clock
from towline.runtime.config import OperatorConfig
from towline.runtime.steptypes import StepTypeCache, TypeKey
from towline.runtime.workqueue import WorkQueue
from towline.validation.catalog import ConnectorCatalog, connector_catalog
from towline.validation.codesteps import CodeStepPolicy
from towline.validation.steptypes import check_step_type
from towline_connectors.wire import parse_rfc3339

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What the process keeps per run: enough for a Workflow's lastRun, never the body."""

    workflow: str
    created: str
    phase: str
    started_at: str | None
    finished_at: str | None
    webhook: bool
    """Started by a webhook delivery (kept through the replay window, see handlers/history.py)."""
    open_gates: int
    """Approval gates waiting for a decision (the approvals-pending gauge)."""
    gate_expiry: float | None
    """When the first of those expires, Unix seconds (the approvals-expiring alert's gauge)."""

    @classmethod
    def of(cls, body: dict[str, Any]) -> RunSummary:
        status = body.get("status") or {}
        return cls(
            workflow=str(((body.get("spec") or {}).get("workflowRef") or {}).get("name", "")),
            created=str(body["metadata"].get("creationTimestamp") or ""),
            phase=str(status.get("phase") or "Pending"),
            started_at=status.get("startedAt"),
            finished_at=status.get("finishedAt"),
            webhook=(((body.get("spec") or {}).get("trigger") or {}).get("type") == "webhook"),
            open_gates=open_approval_gates(body),
            gate_expiry=next_gate_expiry(body),
        )


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
    run_summaries: dict[Key, RunSummary] = field(default_factory=dict)
    workflow_keys: set[Key] = field(default_factory=set)
    children: ChildCache = field(default_factory=ChildCache)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _latest_bodies: dict[Key, dict[str, Any]] = field(default_factory=dict)
    """The latest watch event's body of each run in flight (dropped when it finishes)."""
    _written_versions: dict[Key, int] = field(default_factory=dict)
    """The resourceVersion of this process's last status write per run in flight."""
    _watches: KubeApi | None = None
    """The connection of the child watches (towline.runtime.childwatch), apart from the passes' requests."""

    def __post_init__(self) -> None:
        self.workflows = WorkQueue("workflows", clock=self.clock.monotonic, wall_clock=self.clock.now)
        self.runs.max_retries = self.workflows.max_retries = self.config.max_retries
        self.step_type_queue.max_retries = self.config.max_retries
        self._catalog = connector_catalog()
        self.step_types = StepTypeCache(self.config.step_image_policy)
        self.leader = LeaderElector(
            self.connection, namespace=self.config.namespace, name=self.config.lease_name,
            identity=self.config.identity, timings=self.config.leader_timings,
        )
        self._api = self.connection.fenced(lambda: self.leader.is_leader)
        self.api_server = ApiServerAddresses(lambda: read_api_server_addresses(self.connection),
                                             changed=self._except_in_running_steps)
        self._action_context = ActionContext(
            api=self._api, pod_settings=self.config.pod_settings, connector_ports=self._catalog.connector_ports,
            remember=self._remember_created, api_server_networks=self.api_server.networks,
            default_deny=DefaultDenyPolicies(),
        )

    # ReconcileContext
    @property
    def api(self) -> KubeApi:
        return self._api

    @property
    def catalog(self) -> ConnectorCatalog:
        return self._catalog

    @property
    def code_steps(self) -> CodeStepPolicy:
        return self.config.code_steps

    def step_types_for(self, namespace: str) -> dict[str, ResolvedStepType | str]:
        return self.step_types.available(namespace)

    def check_step_type(self, body: dict[str, Any]) -> ResolvedStepType | list[str]:
        return check_step_type(body, self.config.step_image_policy)

    def requeue_step_type(self, key: TypeKey) -> None:
        self.step_type_queue.add(key)

    def saw_step_type(self, body: dict[str, Any], *, deleted: bool) -> None:
        """A type changed or went: report on it, and validate again every Workflow that may name it."""
        key = self.step_types.saw(body, deleted=deleted)
        namespace = key[0]
        if not deleted:
            self.step_type_queue.add(key)
        for workflow in list(self.workflow_keys):
            if not namespace or workflow[0] == namespace:
                self.workflows.add(workflow)

    @property
    def action_context(self) -> ActionContext:
        return self._action_context

    def now(self) -> datetime:
        return self.clock.now()

    @property
    def identity_user(self) -> str:
        return f"system:serviceaccount:{self.config.namespace}:{self.config.service_account}"

    async def observe(self, namespace: str, run: str, run_uid: str, status: WorkflowRunStatus) -> Observed:
        key = (namespace, run)
        if self.children.covers(key, status):
            metrics.CACHE_READS.labels("hit").inc()
            return build_observed(*self.children.children(key), run_name=run, run_uid=run_uid)
        metrics.CACHE_READS.labels("listed").inc()
        jobs, pods, approvals = await list_children(self.api, namespace, run)
        for kind, bodies in (("Job", jobs), ("Pod", pods), ("Approval", approvals)):
            for body in bodies:
                self.children.saw(kind, {**body, "metadata": {**body["metadata"], "namespace": namespace}})
        return build_observed(jobs, pods, approvals, run_name=run, run_uid=run_uid)

    def latest_run(self, key: Key) -> dict[str, Any] | None:
        body = self._latest_bodies.get(key)
        if body is None or _version(body) < self._written_versions.get(key, 0):
            return None  # older than this process's own last write: read it
        return body

    def wrote_run(self, key: Key, written: dict[str, Any]) -> None:
        self._written_versions[key] = _version(written)

    def requeue_run(self, key: Key) -> None:
        self.runs.add(key)

    def requeue_workflow(self, key: Key) -> None:
        self.workflows.add(key)

    def runs_in_line(self, namespace: str, workflow: str) -> list[RunInLine]:
        return [RunInLine(name, parse_rfc3339(summary.created), started=summary.phase != "Pending",
                          finished=summary.phase in TERMINAL_RUN_PHASES)
                for (ns, name), summary in list(self.run_summaries.items())
                if ns == namespace and summary.workflow == workflow and summary.created]

    def wake_queued_runs(self, namespace: str, workflow: str) -> None:
        for (ns, name), summary in list(self.run_summaries.items()):
            if ns == namespace and summary.workflow == workflow and summary.phase == "Pending":
                self.runs.add((ns, name))

    def _remember_created(self, body: dict[str, Any]) -> None:
        self.children.saw(str(body.get("kind")), body)

    async def _except_in_running_steps(self, networks: tuple[str, ...]) -> None:
        """The API server moved: the leader carves its new addresses out of running steps' policies."""
        if not self.leader.is_leader:
            return  # the leader's own refresh does it
        for (namespace, run), summary in list(self.run_summaries.items()):
            if summary.phase not in TERMINAL_RUN_PHASES:
                await except_in_step_policies(self.api, namespace, run, networks)

    def last_run_of(self, namespace: str, workflow: str) -> LastRun | None:
        mine = [(name, summary) for (ns, name), summary in self.run_summaries.items()
                if ns == namespace and summary.workflow == workflow]
        if not mine:
            return None
        name, latest = max(mine, key=lambda item: item[1].created)
        return LastRun(name=name, phase=latest.phase, started_at=latest.started_at)

    def finished_runs_of(self, namespace: str, workflow: str) -> list[FinishedRun]:
        return [FinishedRun(name, summary.phase, summary.finished_at or "",
                            kept_until(summary.created, summary.webhook))
                for (ns, name), summary in self.run_summaries.items()
                if ns == namespace and summary.workflow == workflow and summary.phase in TERMINAL_RUN_PHASES]

    async def on_run_finished(self, run: dict[str, Any]) -> None:
        """Queue the workflow's pass: it trims the history and refreshes lastRun with the run's final phase."""
        namespace = run["metadata"]["namespace"]
        workflow = run["spec"]["workflowRef"]["name"]
        key = (namespace, run["metadata"]["name"])
        if key in self.run_summaries:
            # The watch event with the final status may not have arrived yet; lastRun must not lag,
            # and the runs queued behind it must not count it as running.
            self.saw_run(key, run)
        self.wake_queued_runs(namespace, workflow)
        self.workflows.add((namespace, workflow))

    # Watch events
    def saw_run(self, key: Key, body: dict[str, Any]) -> None:
        before = self.run_summaries.get(key)
        summary = self.run_summaries[key] = RunSummary.of(body)
        if summary.phase in TERMINAL_RUN_PHASES:
            if before is not None and before.phase not in TERMINAL_RUN_PHASES:
                # Finished by a pass of another replica (or seen before this one's own report): a slot is free.
                self.wake_queued_runs(key[0], summary.workflow)
            # A finished run is never observed again: its children's copies would only cost memory.
            self.children.forget_run(key)
            self._latest_bodies.pop(key, None)
            self._written_versions.pop(key, None)
        else:
            # Held while the run is in flight, never once it finished: passes decide on it instead of a read.
            self._latest_bodies[key] = body

    def wants_children(self, key: Key) -> bool:
        """Whether to cache this run's children: unless the run is known to have finished."""
        summary = self.run_summaries.get(key)
        return summary is None or summary.phase not in TERMINAL_RUN_PHASES

    def forgot_run(self, key: Key) -> None:
        summary = self.run_summaries.pop(key, None)
        if summary is not None and summary.phase not in TERMINAL_RUN_PHASES:
            self.wake_queued_runs(key[0], summary.workflow)  # deleted before it finished: its slot is free
        self._latest_bodies.pop(key, None)
        self._written_versions.pop(key, None)
        self.runs.forget(key)
        self.children.forget_run(key)

    # Lifecycle
    async def start(self) -> None:
        await self.api_server.refresh()  # before any step could start; retried in the background if it fails
        self.tasks.append(asyncio.create_task(self.api_server.run(), name="api-server-addresses"))
        self.tasks.append(asyncio.create_task(self.leader.run(), name="leader"))
        self._watches = self.connection.separate()
        events = ChildEvents(self.children, self._action_context.default_deny, self.wants_children, self.runs.add)
        self.tasks.append(asyncio.create_task(
            watch_children(self._watches, self.config.watch_namespaces, events), name="child-watches"))
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
        self.tasks.append(asyncio.create_task(self._requeue_on_leadership(), name="leadership-requeue"))
        self.tasks.append(asyncio.create_task(self._recheck_when_the_clock_moves(), name="clock-moved"))

    async def stop(self) -> None:
        """A graceful stop: end every reconcile first, then hand the Lease over for a replacement to take at once."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._watches is not None:
            await self._watches.close()
        await self.leader.release()
        await self.connection.close()

    def _leading(self, process: Callable[[Key], Awaitable[None]]) -> Callable[[Key], Awaitable[None]]:
        """Only the Lease holder acts; followers re-queue everything when they take over."""

        async def guarded(key: Key) -> None:
            if not self.leader.is_leader:
                return
            try:
                await self._while_leading(process(key))
            except WriteFenced as refused:
                log.warning("%s/%s: %s; the new leader takes over", *key, refused)

        return guarded

    async def _while_leading(self, work: Awaitable[None]) -> None:
        """Run `work`, cancelling it as soon as this replica's renew deadline passes."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=max(0.05, self.leader.seconds_left()))
                if done:
                    return task.result()
                if not self.leader.is_leader:
                    log.warning("lost the Lease during a pass; cancelling it")
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    return None
        finally:
            task.cancel()

    async def _requeue_on_leadership(self) -> None:
        while True:
            await self.leader.became_leader.wait()
            for key in list(self.run_summaries):
                self.runs.add(key)
            for key in list(self.workflow_keys):
                self.workflows.add(key)
            for key in self.step_types.type_keys():
                self.step_type_queue.add(key)
            await self.leader.lost_leadership.wait()

    async def _recheck_when_the_clock_moves(self) -> None:
        """A jump forward may make delayed Workflow passes (a schedule's next slot) due now."""
        while True:
            await self.clock.moved()
            self.workflows.recheck()

    async def _reconcile_run(self, key: Key) -> None:
        wake_at = await reconcile_run(self, *key)
        if wake_at is not None:
            self.runs.add_at(key, wake_at)

    async def _reconcile_workflow(self, key: Key) -> None:
        wake_at = await reconcile_workflow(self, *key)
        if wake_at is not None:
            self.workflows.add_at(key, wake_at)

    async def _reconcile_step_type(self, key: Key) -> None:
        await reconcile_step_type(self, *key)

    async def _give_up_step_type(self, key: Key, attempts: int, error: BaseException) -> None:
        log.error("step type %s/%s: %d passes failed, the last with %s: %s", *key, attempts, type(error).__name__,
                  error)

    async def _give_up_run(self, key: Key, attempts: int, error: BaseException) -> None:
        if self.leader.is_leader:
            await report_reconcile_failure(self, *key, attempts, error)

    async def _give_up_workflow(self, key: Key, attempts: int, error: BaseException) -> None:
        log.error("workflow %s/%s: %d passes failed, the last with %s: %s", *key, attempts, type(error).__name__, error)


def _version(body: dict[str, Any]) -> int:
    text = (body.get("metadata") or {}).get("resourceVersion")
    return int(text) if isinstance(text, str) and text.isdigit() else 0
