"""The manager's side of what each reconciler gets (towline.handlers.context): a run's children and what the
process remembers of runs, over the watches' caches and the run queue.

Built once by the `Operator` and handed to the run reconciler; nothing here decides anything about a run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from towline.api.run import WorkflowRun, WorkflowRunStatus
from towline.engine.observed import Observed
from towline.handlers.context import Key
from towline.k8s.client import KubeApi
from towline.k8s.observe import KeptObservations, build_observed, list_children
from towline.k8s.steppods import keep_step_pods
from towline.runtime import metrics
from towline.runtime.cache import ChildCache
from towline.runtime.runstore import RunStore


@dataclass
class WatchedChildren:
    """A run's Jobs, pods and Approvals for its pass: from the child watches' cache when it covers the run, else
    listed (and learned, so the next pass finds them)."""

    api: KubeApi
    cache: ChildCache
    observations: KeptObservations = field(default_factory=KeptObservations)

    async def observe(self, namespace: str, run: str, run_uid: str, status: WorkflowRunStatus) -> Observed:
        key = (namespace, run)
        if self.cache.covers(key, status):
            metrics.CACHE_READS.labels("hit").inc()
            return build_observed(*self.cache.children(key), run_name=run, run_uid=run_uid, kept=self.observations)
        metrics.CACHE_READS.labels("listed").inc()
        jobs, pods, approvals = await list_children(self.api, namespace, run)
        for kind, bodies in (("Job", jobs), ("Pod", pods), ("Approval", approvals)):
            for body in bodies:
                self.cache.learned(kind, {**body, "metadata": {**body["metadata"], "namespace": namespace}})
        return build_observed(jobs, pods, approvals, run_name=run, run_uid=run_uid, kept=self.observations)

    async def keep_step_pods(self, namespace: str, run: str, now: datetime, *, run_over: bool = False,
                             ) -> datetime | None:
        jobs, pods, _ = self.cache.children((namespace, run))
        return await keep_step_pods(self.api, jobs, pods, now, learned=self.learned, wrote=self.wrote,
                                    run_over=run_over)

    def learned(self, body: dict[str, Any]) -> None:
        """A create returned this Job or Approval (made or adopted), before its watch event arrives."""
        self.cache.learned(str(body.get("kind")), body)

    def wrote(self, body: dict[str, Any]) -> None:
        self.cache.wrote(str(body.get("kind")), body)


@dataclass(frozen=True)
class RememberedRuns:
    """What the process keeps of each run between passes (towline.runtime.runstore), and a requeue on a conflict."""

    store: RunStore
    requeue: Callable[[Key], None]

    def latest(self, key: Key) -> dict[str, Any] | None:
        return self.store.latest(key)

    def parse(self, key: Key, raw: dict[str, Any]) -> WorkflowRun:
        return self.store.parsed.parse(key, raw)

    def wrote(self, key: Key, written: dict[str, Any], run: WorkflowRun) -> None:
        self.store.wrote(key, written, run)

    def conflicted(self, key: Key) -> None:
        self.store.conflicted(key)
        self.requeue(key)
