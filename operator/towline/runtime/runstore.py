"""What one operator process knows of the runs it watches: the stores the reconcilers read instead of the API.

Per run a summary (indexed by Workflow: lastRun, the queue behind `maxConcurrentRuns`, cron concurrency,
history limits), the latest body of each run in flight (a pass decides on it instead of a read), the
expectations for the process's own status writes, and the run's children (`ChildCache`). Fed by watch
events and by the process's own writes; it never calls the API server and never touches a queue: it
answers, and the `Operator` decides whom to wake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from towline.api.run import WorkflowRun
from towline.api.workflow import LastRun
from towline.engine import TERMINAL_RUN_PHASES, RunInLine
from towline.handlers.context import Key
from towline.handlers.history import FinishedRun, kept_until
from towline.handlers.parsed import ParsedRuns
from towline.k8s.client import resource_version
from towline.k8s.indexer import Index, Store
from towline.k8s.labels import RUN_ARCHIVE_FINALIZER
from towline.k8s.runletters import failed_before_first_step, replayed_run
from towline.metrics import next_gate_expiry, open_approval_gates
from towline.runtime.cache import ChildCache
from towline_connectors.wire import parse_rfc3339


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
    awaiting_archive: bool = False
    """Over (or being deleted) and still held by the archive's finalizer: not in the record yet."""
    name: str = ""
    trigger: str = "manual"
    """How it was started (spec.trigger.type)."""
    letter_since: float | None = None
    """When it became a dead letter of kind run (failed before its first step; k8s.runletters), Unix seconds."""
    replays: str | None = None
    """The failed run this run replays (its towline.dev/replay-of), which is then no waiting letter."""

    @classmethod
    def of(cls, body: dict[str, Any]) -> RunSummary:
        status = body.get("status") or {}
        letter_since = None
        if failed_before_first_step(body):
            moment = status.get("finishedAt") or body["metadata"].get("creationTimestamp")
            letter_since = parse_rfc3339(str(moment)).timestamp() if moment else None
        return cls(
            workflow=str(((body.get("spec") or {}).get("workflowRef") or {}).get("name", "")),
            created=str(body["metadata"].get("creationTimestamp") or ""),
            phase=str(status.get("phase") or "Pending"),
            started_at=status.get("startedAt"),
            finished_at=status.get("finishedAt"),
            webhook=(((body.get("spec") or {}).get("trigger") or {}).get("type") == "webhook"),
            open_gates=open_approval_gates(body),
            gate_expiry=next_gate_expiry(body),
            awaiting_archive=RUN_ARCHIVE_FINALIZER in (body["metadata"].get("finalizers") or ()) and (
                status.get("phase") in TERMINAL_RUN_PHASES or bool(body["metadata"].get("deletionTimestamp"))),
            name=str(body["metadata"].get("name") or ""),
            trigger=str(((body.get("spec") or {}).get("trigger") or {}).get("type") or "manual"),
            letter_since=letter_since, replays=replayed_run(body),
        )

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_RUN_PHASES


BY_WORKFLOW: Index[Key, RunSummary, Key] = Index("workflow", lambda key, summary: (key[0], summary.workflow))
"""Every run of a Workflow, by (namespace, workflow)."""
QUEUED: Index[Key, RunSummary, Key] = Index(
    "queued", lambda key, summary: (key[0], summary.workflow) if summary.phase == "Pending" else None)
"""A Workflow's runs that have not started."""
IN_FLIGHT: Index[Key, RunSummary, bool] = Index("in_flight", lambda key, summary: None if summary.finished else True)
AWAITING_ARCHIVE: Index[Key, RunSummary, str] = Index(
    "awaiting_archive", lambda key, summary: key[0] if summary.awaiting_archive else None)
"""By namespace, the runs over (or being deleted) that the archive's finalizer still holds."""
PENDING: Index[Key, RunSummary, str] = Index(
    "pending", lambda key, summary: key[0] if summary.phase == "Pending" else None)
"""By namespace, the runs that have not started."""


def _summaries() -> Store[Key, RunSummary]:
    return Store(BY_WORKFLOW, QUEUED, IN_FLIGHT, AWAITING_ARCHIVE, PENDING)


@dataclass
class RunStore:
    summaries: Store[Key, RunSummary] = field(default_factory=_summaries)
    """Every run the watch showed, indexed by Workflow, by Workflow of the queued ones, and in flight."""
    children: ChildCache = field(default_factory=ChildCache)
    parsed: ParsedRuns = field(default_factory=ParsedRuns)
    """Each run in flight as last parsed, by resourceVersion (dropped with its body)."""
    _latest_bodies: dict[Key, dict[str, Any]] = field(default_factory=dict)
    """Each run in flight as last known: its latest watch event, or this process's own write until the watch
    shows that write (dropped when the run finishes)."""
    _awaited_echoes: dict[Key, str] = field(default_factory=dict)
    """client-go's expectations for the operator's own writes: the resourceVersion of the last status write per
    run whose watch event has not arrived. The watch delivers in order, so until it does every event is older
    than the write; versions are opaque and only ever compared for equality."""

    # Watch events
    def saw(self, key: Key, body: dict[str, Any]) -> RunSummary | None:
        """A watch event (or this process's own final write); the run's summary when it shows a run in flight
        finished (its slot is free), else None."""
        summary = RunSummary.of(body)
        before = self.summaries.put(key, summary)
        if summary.finished:
            # A finished run is never observed again: its children's copies would only cost memory.
            self.children.forget_run(key)
            self._latest_bodies.pop(key, None)
            # (The version of this process's final write stays awaited: its echo is no news, whenever it comes.)
            self.parsed.forget(key)
            return summary if before is not None and not before.finished else None
        # Held while the run is in flight, never once it finished: passes decide on it instead of a read.
        awaited = self._awaited_echoes.get(key)
        if awaited is None:
            self._latest_bodies[key] = body
        elif resource_version(body) == awaited:
            del self._awaited_echoes[key]
            self._latest_bodies[key] = body
        # else: an event from before this process's own write, whose answer is newer; keep that
        return None

    def forgot(self, key: Key) -> RunSummary | None:
        """The run was deleted; returns what was known of it."""
        self._latest_bodies.pop(key, None)
        self._awaited_echoes.pop(key, None)
        self.parsed.forget(key)
        self.children.forget_run(key)
        return self.summaries.pop(key)

    def own_echo(self, key: Key, body: dict[str, Any]) -> bool:
        """`body` is the watch's echo of this process's last status write of the run (call before `saw`)."""
        awaited = self._awaited_echoes.get(key)
        return awaited is not None and resource_version(body) == awaited

    def is_in_flight(self, key: Key) -> bool:
        """Whether the run is known and has not finished: a pass may still list or create its children."""
        summary = self.summaries.get(key)
        return summary is not None and not summary.finished

    def wants_children(self, key: Key) -> bool:
        """Whether to cache this run's children: unless the run is known to have finished."""
        summary = self.summaries.get(key)
        return summary is None or not summary.finished

    # The process's own writes
    def latest(self, key: Key) -> dict[str, Any] | None:
        return self._latest_bodies.get(key)

    def wrote(self, key: Key, written: dict[str, Any], run: WorkflowRun | None = None) -> None:
        version = resource_version(written)
        current = self._latest_bodies.get(key)
        if current is not None and version is not None and resource_version(current) == version:
            return  # the watch showed the write before its answer was handled
        self._awaited_echoes.pop(key, None)
        if version is None or (written.get("status") or {}).get("phase") in TERMINAL_RUN_PHASES:
            self._latest_bodies.pop(key, None)  # read it next time; a finished run keeps no body
            self.parsed.forget(key)
            if version is not None:
                # Its echo needs no pass (each finished run had one, which read the run to find nothing to do);
                # a later change (a late cancel) has another version and does.
                self._awaited_echoes[key] = version
            return
        if run is not None:
            self.parsed.wrote(key, written, run)
        self._latest_bodies[key] = written
        self._awaited_echoes[key] = version

    def conflicted(self, key: Key) -> None:
        """Somebody wrote after what this process knows (or a relisted watch never showed its own write's
        version): forget the body, so the next pass reads the run."""
        self._latest_bodies.pop(key, None)
        self._awaited_echoes.pop(key, None)

    # Lookups by Workflow
    def in_line(self, namespace: str, workflow: str) -> list[RunInLine]:
        return [RunInLine.of_phase(name, parse_rfc3339(summary.created), summary.phase)
                for (_, name), summary in self.summaries.by(BY_WORKFLOW, (namespace, workflow)) if summary.created]

    def queued(self, namespace: str, workflow: str) -> list[Key]:
        return self.summaries.keys_by(QUEUED, (namespace, workflow))

    def awaiting_archive(self, namespace: str) -> int:
        """The namespace's runs over (or being deleted) that still hold the archive's finalizer."""
        return self.summaries.count_by(AWAITING_ARCHIVE, namespace)

    def pending_in(self, namespace: str) -> list[Key]:
        """The namespace's runs that have not started (held by a limit, or not looked at yet)."""
        return self.summaries.keys_by(PENDING, namespace)

    def in_flight(self) -> list[Key]:
        return self.summaries.keys_by(IN_FLIGHT, True)

    def last_run_of(self, namespace: str, workflow: str) -> LastRun | None:
        mine = [(name, summary) for (_, name), summary in self.summaries.by(BY_WORKFLOW, (namespace, workflow))]
        if not mine:
            return None
        name, latest = max(mine, key=lambda item: item[1].created)
        return LastRun(name=name, phase=latest.phase, started_at=latest.started_at)

    def finished_runs_of(self, namespace: str, workflow: str) -> list[FinishedRun]:
        return [FinishedRun(name, summary.phase, summary.finished_at or "",
                            kept_until(summary.created, summary.webhook))
                for (_, name), summary in self.summaries.by(BY_WORKFLOW, (namespace, workflow)) if summary.finished]
