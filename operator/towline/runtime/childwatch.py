"""The operator's own watches of step Jobs, step pods, Approvals and the default-deny NetworkPolicies.

These change several times per step (a Job three or four times, its pod four
or five, and each again when the history limit deletes them). Handed through
kopf, every one of those events took a per-object worker, read-only Body views
and a handler invocation: most of the operator's CPU per step
(docs/benchmarks.md). Their events only feed the child cache, wake runs and
keep the default-deny record, so a plain list+watch stream
(`towline.k8s.streams`, over towline.k8s.reflector) does it, as for runs
(towline.runtime.runwatch); Workflows and step types stay on kopf
(docs/runtime.md, "Where events come from", lists every kind and its watch).
An Approval's decision is what a waiting run waits for: through kopf, whose
per-namespace watches of a namespace pattern and per-object workers stand
between the event and the run, one decision was seen by no pass in a suite run
(the run waited for its expiry); here it takes the same stream as the Jobs.

Every replica watches (a new leader's cache is warm). Each stream selects on
the API server: Jobs with the run label, pods labelled as step pods once they
ended, and NetworkPolicies by name (a label is no proof). The
default-deny policies are re-judged after every (re-)list: a namespace whose
policy the list no longer shows is no longer taken as intact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from towline.jsontypes import JSON
from towline.k8s.actions import DefaultDenyPolicies
from towline.k8s.client import APPROVALS, JOBS, NETWORK_POLICIES, PODS, KubeApi, Resource
from towline.k8s.labels import LABEL_RUN, LABEL_STEP_POD
from towline.k8s.objects import DEFAULT_DENY_POLICY
from towline.k8s.podphase import pod_ended
from towline.k8s.steppods import deleting, holds_finalizer
from towline.k8s.streams import LISTED, Listing, follow, scopes
from towline.runtime.cache import ChildCache

Key = tuple[str, str]


@dataclass(frozen=True)
class Stream:
    kind: str
    resource: Resource
    label_selector: str | None = None
    field_selector: str | None = None


FINISHED_PODS = "status.phase!=Pending,status.phase!=Running"
"""Step pods are kept for their result document only, which a pod has once it ended: the API server leaves out the
three or four events of each pod on its way there (a watched pod enters the selection as ADDED when it ends). A
finished Job whose pod's end has not arrived yet is listed live instead (`ChildCache.covers`)."""

STREAMS = (
    Stream("Job", JOBS, label_selector=LABEL_RUN),
    Stream("Pod", PODS, label_selector=f"{LABEL_STEP_POD}=true", field_selector=FINISHED_PODS),
    Stream("NetworkPolicy", NETWORK_POLICIES, field_selector=f"metadata.name={DEFAULT_DENY_POLICY}"),
    Stream("Approval", APPROVALS, label_selector=LABEL_RUN),
)


@dataclass
class ChildEvents:
    """Where the streams' events go: the operator's cache, its run queue and its default-deny record."""

    children: ChildCache
    default_deny: DefaultDenyPolicies | None
    wants_children: Callable[[Key], bool]
    """False for a run known to have finished: its children are not kept."""
    wake_run: Callable[[Key], None]
    in_flight: Callable[[Key], bool] = lambda key: True
    """Whether the run is known and unfinished: only then is a deletion of its children remembered."""

    def apply(self, kind: str, event: str, body: JSON) -> None:
        """One event of a stream (ADDED, MODIFIED, DELETED, or LISTED by a (re-)list)."""
        if kind == "NetworkPolicy":
            if self.default_deny is not None:
                self.default_deny.saw(body, deleted=event == "DELETED")
            return
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), (meta.get("labels") or {}).get(LABEL_RUN, ""))
        if event == "DELETED":
            # News only for a run in flight: the garbage collector deletes the children of a run deleted by its
            # history limit after the run went, and each Job's deletion woke that run for a pass that read it.
            in_flight = bool(key[1]) and self.in_flight(key)
            self.children.gone(kind, body, remember=in_flight)
            changed = in_flight and kind in ("Job", "Approval")
        elif key[1] and deleting(body) and not holds_finalizer(body) and not self.in_flight(key):
            return  # the garbage collector deleting the children of a run that is gone (or finished): no news
        elif key[1] and not self.wants_children(key):
            if kind != "Pod" or not holds_finalizer(body):
                return
            # A finished run's pod the operator still holds (one that ended after its run): the run's pass lets
            # it go (towline.k8s.steppods). Once: the pod's later updates (the kubelet's last status writes) arrive
            # still held while that pass is under way, and each woke the finished run for a pass with nothing to do.
            known = self.children.cached(kind, body)
            self.children.saw(kind, body, listed=event == LISTED)
            changed = not (known is not None and holds_finalizer(known) and pod_ended(known))
        else:
            changed = self.children.saw(kind, body, listed=event == LISTED)
        # A step's progress (a missing Secret included: the runner fails the attempt) arrives through its Job,
        # and a success first through its pod (`observe.attempt_state`); a pod is otherwise cached for its
        # result document only. Any change of an Approval (a decision) is news for its run.
        if changed and key[1]:
            self.wake_run(key)

    def listed(self, kind: str, namespaces: set[str], scope: str | None) -> None:
        """A (re-)list of `scope` (None: every namespace) ended, showing default-deny policies in `namespaces`."""
        if kind == "NetworkPolicy" and self.default_deny is not None:
            self.default_deny.keep_only(namespaces, scope)


async def watch_children(api: KubeApi, namespaces: tuple[str, ...], events: ChildEvents) -> None:
    """Run every stream for `namespaces` (empty: the whole cluster; names and kopf's globs, see
    towline.k8s.streams) until cancelled."""
    await asyncio.gather(*(
        follow(api, stream.resource, scope, _listing(events, stream.kind, scope).take, what=stream.kind,
               wanted=wanted, label_selector=stream.label_selector, field_selector=stream.field_selector)
        for stream in STREAMS for scope, wanted in scopes(namespaces)
    ))


def _listing(events: ChildEvents, kind: str, scope: str | None) -> Listing[str]:
    """One stream's events into `events`, counting the namespaces a (re-)list showed."""
    return Listing(apply=lambda event, body: events.apply(kind, event, body),
                   seen_of=lambda body: str((body.get("metadata") or {}).get("namespace", "")),
                   synced=lambda namespaces: events.listed(kind, namespaces, scope))
