"""What a reconcile needs from the process that runs it, and nothing more.

Handlers depend on this protocol, never on the runtime that implements it:
the runtime (queues, leadership, caches) sits above the handlers and hands
itself in.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from towline.api.run import WorkflowRun, WorkflowRunStatus
from towline.api.steptype import ResolvedStepType
from towline.api.workflow import LastRun
from towline.engine.observed import Observed
from towline.engine.queue import RunInLine
from towline.handlers.history import FinishedRun
from towline.k8s.actions import ActionContext
from towline.k8s.client import KubeApi
from towline.validation.catalog import ConnectorCatalog
from towline.validation.codesteps import CodeStepPolicy

Key = tuple[str, str]
"""(namespace, name)"""


class ReconcileContext(Protocol):
    @property
    def api(self) -> KubeApi:
        """The API connection reconciles write through (refuses writes once the Lease is lost)."""

    @property
    def catalog(self) -> ConnectorCatalog:
        """The built-in actions."""

    @property
    def code_steps(self) -> CodeStepPolicy:
        """Where code steps (code.python, code.wasm) may run: the chart's codeSteps values."""

    @property
    def archive_finalizer(self) -> str | None:
        """The finalizer every run carries until the archive has written it; None: no archive runs."""

    @property
    def archive_max_runs_awaiting(self) -> int:
        """While the archive is on, the number of a namespace's ended runs awaiting it at which no new run starts
        there (the chart's archive.maxRunsAwaiting); 0: no limit, or no archive."""

    def runs_awaiting_archive(self, namespace: str) -> int:
        """The namespace's runs over (or being deleted) that the archive has not written yet, as the watch has shown
        them."""

    def step_types_for(self, namespace: str) -> Mapping[str, ResolvedStepType | str]:
        """action (`steptype/<name>`, `clustersteptype/<name>`) -> the type now, or why it cannot be used."""

    def check_step_type(self, body: dict[str, Any]) -> ResolvedStepType | list[str]:
        """This StepType or ClusterStepType as a run would use it, or why it cannot be used (each names the
        field), by the operator's image policy."""

    def requeue_step_type(self, key: Key) -> None:
        """Look at this type again soon; `key` is (namespace, name), namespace "" for a ClusterStepType."""

    @property
    def action_context(self) -> ActionContext: ...

    def now(self) -> datetime:
        """The operator's wall time (UTC): what a Workflow's schedules fire by."""

    @property
    def identity_user(self) -> str:
        """The operator's own user name, recorded as the creator of runs it starts."""

    async def observe(self, namespace: str, run: str, run_uid: str, status: WorkflowRunStatus) -> Observed:
        """The run's Jobs, pods and Approvals as they are (from the watches where they suffice); only what the
        run (UID `run_uid`) controls counts."""

    async def keep_step_pods(self, namespace: str, run: str, now: datetime, *, run_over: bool = False,
                             ) -> datetime | None:
        """What the run's Jobs and pods still need of the operator (towline.k8s.steppods): a pod a stopped pass did
        not make, the record of a pod's end on its Job, a pod past its deadline stopped, the finalizer of a pod
        whose end is recorded (or whose run is over: `run_over`) removed; when to look again, if ever."""

    def latest_run(self, key: Key) -> dict[str, Any] | None:
        """The run's body from its latest watch event, unless a newer version of it is known; None: read it.

        A body older than the API server's is safe to decide on: the status write carries its
        resourceVersion, so it fails with a conflict and the next pass reads afresh.
        """

    def parsed_run(self, key: Key, raw: dict[str, Any]) -> WorkflowRun:
        """`raw` validated; the same model again while its resourceVersion is unchanged (callers never mutate it)."""

    def wrote_run(self, key: Key, written: dict[str, Any], run: WorkflowRun) -> None:
        """The pass wrote the run's status; `written` is the API server's answer (the next pass decides on it)
        and `run` that answer as a model (kept for it, so the answer is never parsed)."""

    def decided_run(self, key: Key, phase: str) -> None:
        """This pass's status write moved the run to a final phase (counted per shard: who decided each run)."""

    def write_conflicted(self, key: Key) -> None:
        """The pass's status write lost to somebody else's: forget what is known of the run and look again soon
        (the next pass reads it)."""

    def requeue_workflow(self, key: Key) -> None: ...

    def runs_in_line(self, namespace: str, workflow: str) -> list[RunInLine]:
        """The workflow's runs as the watch has shown them, for policy.maxConcurrentRuns (may be behind)."""

    def wake_queued_runs(self, namespace: str, workflow: str) -> None:
        """Look again soon at the workflow's runs that have not started: a slot or the limit may have changed."""

    def last_run_of(self, namespace: str, workflow: str) -> LastRun | None: ...

    def finished_runs_of(self, namespace: str, workflow: str) -> list[FinishedRun]:
        """The workflow's finished runs the watch has shown (for its history limits)."""

    async def on_run_finished(self, run: dict[str, Any]) -> None:
        """The pass that finished `run` wrote its final status (its Workflow's pass trims the history)."""
