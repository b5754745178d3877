"""The operator's own watches of step Jobs, step pods and the default-deny NetworkPolicies.

These change several times per step (a Job three or four times, its pod four
or five, and each again when the history limit deletes them). Handed through
kopf, every one of those events took a per-object worker, read-only Body views
and a handler invocation: most of the operator's CPU per step
(docs/benchmarks.md). Their events only feed the child cache, wake runs and
keep the default-deny record, so a plain list+watch stream
(`towline.k8s.live.watch_objects`) does it; Workflows, runs, Approvals and step
types stay on kopf.

Every replica watches (a new leader's cache is warm). Each stream selects as
kopf did: Jobs with the run label, pods labelled as step pods, and
NetworkPolicies by name (the API server filters; a label is no proof). The
default-deny policies are re-judged after every (re-)list: a namespace whose
policy the list no longer shows is no longer taken as intact.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from towline.k8s.actions import DefaultDenyPolicies
from towline.k8s.client import JOBS, NETWORK_POLICIES, PODS, KubeApi, Resource
from towline.k8s.live import LISTED, SYNCED, watch_objects
from towline.k8s.objects import DEFAULT_DENY_POLICY, LABEL_RUN, LABEL_STEP_POD
from towline.runtime.cache import ChildCache

log = logging.getLogger(__name__)

JSON = dict[str, Any]
Key = tuple[str, str]

PAGE_SIZE = 500
"""Objects per page of a (re-)list, as kopf listed: a start over thousands of finished steps is never one answer."""
RETRY_SECONDS = (0.5, 16.0)
"""First and longest wait before a failed stream is listed again."""


@dataclass(frozen=True)
class Stream:
    kind: str
    resource: Resource
    label_selector: str | None = None
    field_selector: str | None = None


STREAMS = (
    Stream("Job", JOBS, label_selector=LABEL_RUN),
    Stream("Pod", PODS, label_selector=f"{LABEL_STEP_POD}=true"),
    Stream("NetworkPolicy", NETWORK_POLICIES, field_selector=f"metadata.name={DEFAULT_DENY_POLICY}"),
)


@dataclass
class ChildEvents:
    """Where the streams' events go: the operator's cache, its run queue and its default-deny record."""

    children: ChildCache
    default_deny: DefaultDenyPolicies | None
    wants_children: Callable[[Key], bool]
    """False for a run known to have finished: its children are not kept."""
    wake_run: Callable[[Key], None]

    def apply(self, kind: str, event: str, body: JSON) -> None:
        """One event of a stream (ADDED, MODIFIED, DELETED, or LISTED by a (re-)list)."""
        if kind == "NetworkPolicy":
            if self.default_deny is not None:
                self.default_deny.saw(body, deleted=event == "DELETED")
            return
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), (meta.get("labels") or {}).get(LABEL_RUN, ""))
        if event == "DELETED":
            self.children.gone(kind, body)
            changed = True
        elif key[1] and not self.wants_children(key):
            return
        else:
            changed = self.children.saw(kind, body)
        # A step's progress (a missing Secret included: the runner fails the attempt) arrives through its Job;
        # a pod is cached for its result document only.
        if changed and kind == "Job" and key[1]:
            self.wake_run(key)

    def listed(self, kind: str, namespaces: set[str], scope: str | None) -> None:
        """A (re-)list of `scope` (None: every namespace) ended, showing default-deny policies in `namespaces`."""
        if kind == "NetworkPolicy" and self.default_deny is not None:
            self.default_deny.keep_only(namespaces, scope)


async def watch_children(api: KubeApi, namespaces: tuple[str, ...], events: ChildEvents) -> None:
    """Run every stream for `namespaces` (empty: the whole cluster) until cancelled.

    A name is one namespace's stream. A pattern (kopf's globs, e.g. `team-*`, which `--namespace` accepts as kopf
    does) cannot be a request path: the patterns share one cluster-wide stream whose events outside them are
    dropped here (the chart names namespaces exactly; patterns are for tests and local runs).
    """
    names = tuple(namespace for namespace in namespaces if not is_pattern(namespace))
    patterns = tuple(namespace for namespace in namespaces if is_pattern(namespace))
    follows = [_follow(api, stream, scope, events) for stream in STREAMS for scope in names]
    if patterns or not namespaces:
        wanted = None if not namespaces else (lambda namespace: any(fnmatch.fnmatchcase(namespace, p)
                                                                    for p in patterns))
        follows += [_follow(api, stream, None, events, wanted=wanted) for stream in STREAMS]
    await asyncio.gather(*follows)


def is_pattern(namespace: str) -> bool:
    return any(character in namespace for character in "*?[")


async def _follow(api: KubeApi, stream: Stream, scope: str | None, events: ChildEvents,
                  wanted: Callable[[str], bool] | None = None) -> None:
    """One stream, listed again after any failure (never ends but by cancellation); `wanted`: which namespaces
    of a cluster-wide stream count (None: all)."""
    delay = RETRY_SECONDS[0]
    while True:
        listed: set[str] = set()
        try:
            async for event, body in watch_objects(
                api, stream.resource.path(scope), label_selector=stream.label_selector,
                field_selector=stream.field_selector, page_size=PAGE_SIZE,
            ):
                if event == SYNCED:
                    events.listed(stream.kind, listed, scope)
                    listed = set()
                    delay = RETRY_SECONDS[0]
                    continue
                namespace = (body.get("metadata") or {}).get("namespace", "")
                if wanted is not None and not wanted(namespace):
                    continue
                if event == LISTED:
                    listed.add(namespace)
                events.apply(stream.kind, event, body)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the stream must outlive any failure; it lists again
            log.warning("%s watch%s failed (%s: %s); listing again in %.1f s", stream.kind,
                        f" in {scope}" if scope else "", type(error).__name__, error, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, RETRY_SECONDS[1])
