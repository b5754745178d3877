"""The operator's own list+watch streams (step Jobs, pods, default-deny policies, WorkflowRuns): where each runs
and how it outlives a failure.

A stream is `towline.k8s.live.watch_objects` (list in pages, watch from the list's resourceVersion, list again
on 410 Gone or a broken connection) for one namespace, or for the whole cluster. `--namespace` takes kopf's globs
(e.g. `team-*`, as the test workers' operators use): a pattern cannot be a request path, so the patterns share
one cluster-wide stream whose events outside them are dropped here (the chart names namespaces exactly). Any
other failure is logged and the stream lists again after a backoff; it ends only when cancelled.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from towline.k8s.client import KubeApi, Resource
from towline.k8s.live import LISTED, SYNCED, watch_objects

log = logging.getLogger(__name__)

JSON = dict[str, Any]
T = TypeVar("T", bound=Hashable)

PAGE_SIZE = 500
"""Objects per page of a (re-)list, as kopf listed: a start over thousands of finished steps is never one answer."""
RETRY_SECONDS = (0.5, 16.0)
"""First and longest wait before a failed stream is listed again."""
FAILED = "FAILED"
"""What a sink is told when its stream failed (before it lists again): a list it was counting is void."""

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
                 field_selector: str | None = None) -> None:
    """One stream of `resource` in `scope` (None: the cluster), listed again after any failure; never ends but by
    cancellation. `wanted`: which namespaces of a cluster-wide stream count (None: all)."""
    delay = RETRY_SECONDS[0]
    while True:
        try:
            async for event, body in watch_objects(api, resource.path(scope), label_selector=label_selector,
                                                   field_selector=field_selector, page_size=PAGE_SIZE):
                if event == SYNCED:
                    delay = RETRY_SECONDS[0]
                elif wanted is not None and not wanted((body.get("metadata") or {}).get("namespace", "")):
                    continue
                sink(event, body)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the stream must outlive any failure; it lists again
            log.warning("%s watch%s failed (%s: %s); listing again in %.1f s", what,
                        f" in {scope}" if scope else "", type(error).__name__, error, delay)
            sink(FAILED, {})
        await asyncio.sleep(delay)
        delay = min(delay * 2, RETRY_SECONDS[1])
