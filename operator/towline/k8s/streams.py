"""The processes' persistent list+watch streams (the operator's step Jobs, pods, Approvals, default-deny policies
and WorkflowRuns; the archive's runs, Approvals and step pods; the ingress's Workflows and dead-letter stores): where
each runs and how it outlives a failure. With the reflector and the stores (towline.k8s.indexer) it is the one watch
layer every process shares.

A stream is `towline.k8s.reflector.reflect` (list in pages, watch from the list's resourceVersion, list again on
410 Gone, one backoff for every restart) for one namespace, or for the whole cluster. `--namespace` takes kopf's
globs (e.g. `team-*`, as the test workers' operators use): a pattern cannot be a request path, so the patterns
share one cluster-wide stream whose events outside them are dropped here (the chart names namespaces exactly). A
consumer that raises is logged and its stream lists again after the same backoff; it ends only when cancelled.

What a stream hands on carries no `metadata.managedFields` (controller-runtime's `TransformStripManagedFields`): no
consumer reads them (a write sends the fields it means, and an update without managedFields keeps the server's), and
a step pod's or a run's managedFields are a large part of its bytes, kept for every object of every store: the
operator's peak memory held them for every run, Job and pod it watched (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from towline.jsontypes import JSON
from towline.k8s.client import KubeApi, Resource
from towline.k8s.reflector import FAILED, LISTED, PAGE_SIZE, SYNCED, Backoff, reflect

log = logging.getLogger(__name__)

T = TypeVar("T", bound=Hashable)

__all__ = ["FAILED", "LISTED", "PAGE_SIZE", "SYNCED", "Following", "Listing", "Sink", "Wanted", "follow", "scopes"]

Sink = Callable[[str, JSON], None]
"""Takes each event of a stream: LISTED, SYNCED (the (re-)list ended), ADDED, MODIFIED, DELETED, or FAILED."""
Wanted = Callable[[str], bool]


@dataclass
class Listing(Generic[T]):
    """A sink that hands each event on and collects what one (re-)list showed (`seen_of` each LISTED body); when
    the list ends (SYNCED) `synced` gets the whole set, so a store can forget what the list no longer shows. A
    failed stream's partial list is void."""

    apply: Callable[[str, JSON], None]
    seen_of: Callable[[JSON], T]
    synced: Callable[[set[T]], None]
    shown: set[T] = field(default_factory=set)

    def take(self, event: str, body: JSON) -> None:
        if event in (SYNCED, FAILED):
            if event == SYNCED:
                self.synced(self.shown)
            self.shown = set()
            return
        if event == LISTED:
            self.shown.add(self.seen_of(body))
        self.apply(event, body)


def is_pattern(namespace: str) -> bool:
    return any(character in namespace for character in "*?[")


def scopes(namespaces: tuple[str, ...]) -> list[tuple[str | None, Wanted | None]]:
    """Where the streams of `namespaces` (empty: the whole cluster) run: a namespace's own stream per name, and
    one cluster-wide stream for the patterns with the filter of its events (None: all)."""
    names = [namespace for namespace in namespaces if not is_pattern(namespace)]
    patterns = tuple(namespace for namespace in namespaces if is_pattern(namespace))
    found: list[tuple[str | None, Wanted | None]] = [(name, None) for name in names]
    if patterns or not namespaces:
        found.append((None, None if not namespaces else
                      (lambda namespace: any(fnmatch.fnmatchcase(namespace, p) for p in patterns))))
    return found


async def follow(api: KubeApi, resource: Resource, scope: str | None, sink: Sink, *, what: str,
                 wanted: Wanted | None = None, label_selector: str | None = None,
                 field_selector: str | None = None, backoff: Backoff | None = None) -> None:
    """One stream of `resource` in `scope` (None: the cluster), listed again after any failure; never ends but by
    cancellation. `wanted`: which namespaces of a cluster-wide stream count (None: all)."""
    backoff = backoff or Backoff()
    while True:
        try:
            stream = reflect(api, resource.path(scope), label_selector=label_selector,
                             field_selector=field_selector, backoff=backoff, what=what)
            async with contextlib.aclosing(stream):  # its open watch is closed before the next list
                async for event, body in stream:
                    metadata = body.get("metadata") or {}
                    if event not in (SYNCED, FAILED) and wanted is not None and not wanted(
                            metadata.get("namespace", "")):
                        continue
                    metadata.pop("managedFields", None)
                    sink(event, body)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a consumer's failure: the stream outlives it and lists again
            delay = backoff.next()
            log.warning("%s stream%s failed (%s: %s); listing again in %.1f s", what, f" in {scope}" if scope else "",
                        type(error).__name__, error, delay)
            sink(FAILED, {})
            await asyncio.sleep(delay)


class Following:
    """One `follow` stream as a background task of its process (the ingress's Workflow cache and dead-letter
    gauges): `start` begins it, `stop` cancels it and waits until it has ended."""

    def __init__(self, api: KubeApi, resource: Resource, sink: Sink, *, what: str, task_name: str,
                 field_selector: str | None = None) -> None:
        self._api, self._resource, self._sink = api, resource, sink
        self._what, self._task_name, self._field_selector = what, task_name, field_selector
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        stream = follow(self._api, self._resource, None, self._sink, what=self._what,
                        field_selector=self._field_selector)
        self._task = asyncio.create_task(stream, name=self._task_name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
