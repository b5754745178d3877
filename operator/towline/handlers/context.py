"""What each reconciler gets from the process that runs it, and nothing more.

As controller-runtime hands a reconciler its client and listers, the runtime
(the manager: lifecycle, shard Leases, the fenced client, queues) builds one of
these per reconciler, once, and hands it in: `RunDeps` for runs (and their
Approvals, which a run's pass observes and decides on), `WorkflowDeps` for
Workflows, `StepTypeDeps` for StepTypes and ClusterStepTypes. Handlers depend on
these, never on the runtime; a reconciler's tests fake exactly its interface.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from towline.api.events import EventEmitter
from towline.api.run import WorkflowRun, WorkflowRunStatus
from towline.api.spans import SpanEmitter
from towline.api.steptype import ResolvedStepType
from towline.api.workflow import LastRun
from towline.engine.admission import RunInLine
from towline.engine.observed import Observed
from towline.handlers.history import FinishedRun
from towline.jsontypes import JSON
from towline.k8s.actions import ActionContext
from towline.k8s.client import KubeApi
from towline.validation.catalog import ConnectorCatalog
from towline.validation.codesteps import CodeStepPolicy

Key = tuple[str, str]
"""(namespace, name)"""
Now = Callable[[], datetime]
"""A clock: the wall time (UTC) a pass decides by."""
CheckStepType = Callable[[JSON], ResolvedStepType | list[str]]
"""A StepType or ClusterStepType body as a run would use it, or why it cannot be used (each names the field), by the
operator's image policy."""


@dataclass(frozen=True)
class Definitions:
    """What validating a Workflow (or a run's snapshot of one) takes: the built-ins, the step types, code steps."""

    catalog: ConnectorCatalog
    """The built-in actions."""
    code_steps: CodeStepPolicy
    """Where code steps (code.python, code.wasm) may run: the chart's codeSteps values."""
    step_types_for: Callable[[str], Mapping[str, ResolvedStepType | str]]
    """A namespace's types as the watch has shown them: action (`steptype/<name>`, `clustersteptype/<name>`) -> the
    type now, or why it cannot be used."""
    check_step_type: CheckStepType


class RunLister(Protocol):
    """The watch-fed view of runs, indexed by Workflow and namespace (may be behind the API server)."""

    def in_line(self, namespace: str, workflow: str) -> list[RunInLine]:
        """The workflow's runs, for policy.maxConcurrentRuns and a schedule's concurrencyPolicy."""

    def awaiting_archive(self, namespace: str) -> int:
        """The namespace's runs over (or being deleted) that the archive has not written yet."""

    def last_run_of(self, namespace: str, workflow: str) -> LastRun | None: ...

    def finished_runs_of(self, namespace: str, workflow: str) -> list[FinishedRun]:
        """The workflow's finished runs (for its history limits)."""


@dataclass(frozen=True)
class StepTypeDeps:
    """What `reconcile_step_type` uses."""

    api: KubeApi
    """Writes refused once the shard's Lease is lost."""
    check_step_type: CheckStepType
    requeue: Callable[[Key], None]
    """Look at this type again soon; the key's namespace is "" for a ClusterStepType."""
    now: Now


@dataclass(frozen=True)
class WorkflowDeps:
    """What `reconcile_workflow` uses."""

    api: KubeApi
    definitions: Definitions
    runs: RunLister
    now: Now
    """What schedules fire by."""
    creator: str
    """The operator's own user name, recorded as the creator of the runs its schedules start."""
    wake_queued_runs: Callable[[str, str], None]
    """(namespace, workflow): look again soon at its runs that have not started (a slot or the limit changed)."""
    requeue: Callable[[Key], None]


class RunMemory(Protocol):
    """What the process keeps of each run between passes."""

    def latest(self, key: Key) -> JSON | None:
        """The run's body from its latest watch event, unless a newer version of it is known; None: read it.

        A body older than the API server's is safe to decide on: the status write carries its
        resourceVersion, so it fails with a conflict and the next pass reads afresh.
        """

    def parse(self, key: Key, raw: JSON) -> WorkflowRun:
        """`raw` validated; the same model again while its resourceVersion is unchanged (callers never mutate it)."""

    def wrote(self, key: Key, written: JSON, run: WorkflowRun) -> None:
        """The pass wrote the run's status; `written` is the API server's answer (the next pass decides on it)
        and `run` that answer as a model (kept for it, so the answer is never parsed)."""

    def conflicted(self, key: Key) -> None:
        """The pass's write lost to somebody else's: forget what is known of the run and look again soon."""


class RunChildren(Protocol):
    """A run's Jobs, pods and Approvals (towline.k8s.observe, towline.k8s.steppods)."""

    async def observe(self, namespace: str, run: str, run_uid: str, status: WorkflowRunStatus) -> Observed:
        """The run's Jobs, pods and Approvals as they are (from the watches where they suffice); only what the
        run (UID `run_uid`) controls counts."""

    async def keep_step_pods(self, namespace: str, run: str, now: datetime, *, run_over: bool = False,
                             ) -> datetime | None:
        """What the run's Jobs and pods still need of the operator: a pod a stopped pass did not make, the record
        of a pod's end on its Job, a pod past its deadline stopped, the finalizer of a pod whose end is recorded
        (or whose run is over: `run_over`) removed; when to look again, if ever."""


@dataclass(frozen=True)
class ArchiveHold:
    """The archive as the run reconciler sees it; the default: no archive runs."""

    finalizer: str | None = None
    """The finalizer every run carries until the archive has written it."""
    max_runs_awaiting: int = 0
    """The number of a namespace's ended runs awaiting the archive at which no new run starts there (the chart's
    archive.maxRunsAwaiting); 0: no limit."""


@dataclass(frozen=True)
class RunDeps:
    """What `reconcile_run` (and the report of a run whose passes keep failing) uses."""

    api: KubeApi
    """Writes refused once the shard's Lease is lost."""
    actions: ActionContext
    """Carries out the engine's actions (Jobs, Approvals, policies, Events)."""
    definitions: Definitions
    runs: RunLister
    memory: RunMemory
    children: RunChildren
    archive: ArchiveHold
    now: Now
    decided: Callable[[Key, str], None]
    """This pass's status write moved the run to a final phase (counted per shard: who decided each run)."""
    finished: Callable[[JSON], Awaitable[None]]
    """The pass that finished the run (its body with the final status) wrote it; its Workflow's pass trims the
    history."""
    web_view_url: str | None = None
    """The in-cluster web view's origin (ui.url): approval notifications link to the gate's page there."""
    spans: SpanEmitter | None = None
    """The trace export (the chart's tracing.endpoint); None: no traces."""
    events: EventEmitter | None = None
    """The CloudEvents sink (the chart's events.sink); None: no events."""
