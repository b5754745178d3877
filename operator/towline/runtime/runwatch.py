"""The operator's own watch of WorkflowRuns.

A run changes a few times per step (each status write comes back as an event, with the whole run: its snapshot of
the Workflow and every step's record). Handed through kopf, each event took a per-object worker, read-only Body
views and a handler invocation, at several times the cost of decoding it (docs/benchmarks.md). The events only
update what the process knows of runs (towline.runtime.runstore) and queue passes, so a plain list+watch stream
(towline.k8s.streams, over towline.k8s.reflector) does it. Approvals take the same kind of stream
(towline.runtime.childwatch). Workflows and step types stay on kopf: they change when a person commits, a few
events an hour, and kopf also runs the process (login, startup and cleanup, the liveness endpoint). docs/runtime.md
("Where events come from") lists every kind and its watch.

Every replica watches, as before (a new shard holder knows every run); only the holder of a run's shard acts on
the passes queued here (towline.runtime.operator). Unlike kopf, a (re-)list also ends what it no longer shows: a
run deleted while the stream was down is forgotten, so the runs queued behind it get its slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from towline.engine import TERMINAL_RUN_PHASES
from towline.engine.kstatus import kstatus_fields_lag
from towline.jsontypes import JSON
from towline.k8s.client import WORKFLOW_RUNS, KubeApi
from towline.k8s.streams import Listing, Wanted, follow, scopes

Key = tuple[str, str]


@dataclass
class RunEvents:
    """Where the stream's events go: the operator's record of runs and its run queue."""

    saw: Callable[[Key, JSON], bool]
    """Records the event; whether it needs a pass (the echo of the process's own write does not)."""
    forgot: Callable[[Key], None]
    wake: Callable[[Key], None]
    known: Callable[[], Iterable[Key]]
    """Every run the process knows of (for a re-list to end those it no longer shows)."""

    def apply(self, event: str, body: JSON) -> None:
        """One event (ADDED, MODIFIED, DELETED, or LISTED by a (re-)list)."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if event == "DELETED":
            self.forgot(key)
            return
        if not self.saw(key, body):
            return
        # A finished run needs no pass (its Workflow's pass keeps the history), not even after a restart,
        # unless its status has not caught up with its spec's generation (one write, see engine.kstatus).
        status = body.get("status") or {}
        if status.get("phase") not in TERMINAL_RUN_PHASES or kstatus_fields_lag(status, meta.get("generation")):
            self.wake(key)

    def listed(self, shown: set[Key], scope: str | None, wanted: Wanted | None) -> None:
        """A (re-)list of `scope` (None: the cluster, filtered by `wanted`) ended showing `shown`: a known run of
        that scope it did not show was deleted meanwhile."""
        for key in list(self.known()):
            if key in shown or (scope is not None and key[0] != scope) or (wanted is not None and not wanted(key[0])):
                continue
            self.forgot(key)


async def watch_runs(api: KubeApi, namespaces: tuple[str, ...], events: RunEvents) -> None:
    """The runs of `namespaces` (empty: the whole cluster; names and kopf's globs), until cancelled."""
    await asyncio.gather(*(
        follow(api, WORKFLOW_RUNS, scope, _listing(events, scope, wanted).take, what="WorkflowRun", wanted=wanted)
        for scope, wanted in scopes(namespaces)
    ))


def _listing(events: RunEvents, scope: str | None, wanted: Wanted | None) -> Listing[Key]:
    """The stream's events into `events`; the runs a (re-)list showed, so the ones it no longer shows are forgotten."""
    return Listing(apply=events.apply, seen_of=_key, synced=lambda shown: events.listed(shown, scope, wanted))


def _key(body: JSON) -> Key:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
