"""The one list+watch of a collection, as client-go's reflector: every process's streams are this one.

`reflect` lists the collection (in pages: one consistent snapshot), then watches from the list's
resourceVersion (with bookmarks), so nothing between the two is missed. When the API server ends a watch
(its `timeoutSeconds`), the next one starts at once from the last resourceVersion seen, without a list. When
that version is too old (410 Gone, as an answer or an ERROR event) the collection is listed again and its
objects come again as LISTED. A connection that breaks while a watch streams is opened again from the last
version (the API server answers 410 if it no longer has it). Every restart other than the server's clean end
of a watch waits one `Backoff` (exponential, jittered, capped, reset after a healthy period), so a flapping or
absent API server is asked less and less often, and one that recovered is followed again at once.

Who gives up: a persistent stream (the operator, the ingress, the archive) outlives every failure, logs it and
tells its consumer FAILED (a list it was counting is void); a person's stream (`persistent=False`) raises every
error but a 410 and a connection broken mid-watch, so the person sees a refusal or an unreachable API server.

Nothing here sleeps without the backoff, and `resourceVersion` is opaque: only passed back, never compared.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from towline.jsontypes import JSON
from towline.k8s.client import TRANSPORT_ERRORS, ApiError, ApiUnavailable, KubeApi

log = logging.getLogger(__name__)


LISTED, SYNCED, FAILED = "LISTED", "SYNCED", "FAILED"
"""Event types of `reflect` besides the API server's ADDED/MODIFIED/DELETED: an object of a (re-)list, the end of
that list (the watch begins), and a failure of a persistent stream (before it waits and starts again)."""

WATCH_SECONDS = 240
"""How long the API server keeps one watch open before the next is opened from the last resourceVersion."""
PAGE_SIZE = 500
"""Objects per page of a persistent stream's (re-)list, as client-go and kopf list: a start over thousands of
finished steps is never one answer."""


class Gone(Exception):  # noqa: N818 - the API server's 410: the resourceVersion is too old
    """The resourceVersion asked for is older than the API server keeps: list again."""


@dataclass
class Backoff:
    """How long a stream waits before it starts again after a failure: client-go's reflector backoff.

    The base wait starts at `initial` and doubles with every failure up to `cap`; the wait is jittered within
    [base/2, base] (streams that failed together do not come back together, and none waits longer than the
    cap). A stream that went `reset_after` seconds without a failure starts from `initial` again. Clock and
    randomness are passed in, so the sequence is a pure function of them.
    """

    initial: float = 0.5
    cap: float = 30.0
    reset_after: float = 120.0
    clock: Callable[[], float] = time.monotonic
    random: Callable[[], float] = random.random
    _base: float = field(default=0.0, init=False)
    _last_failure: float | None = field(default=None, init=False)

    def next(self) -> float:
        """Seconds to wait now: records one more failure."""
        now = self.clock()
        if self._last_failure is None or now - self._last_failure >= self.reset_after:
            self._base = self.initial
        else:
            self._base = min(self._base * 2, self.cap)
        self._last_failure = now
        return self._base * (0.5 + self.random() / 2)


async def open_stream(api: KubeApi, path: str, query: Mapping[str, str], timeout: aiohttp.ClientTimeout) -> Any:
    """A GET whose body is read as it comes (a watch, a log); raises Gone on 410, ApiError otherwise."""
    try:
        response = await api.send("GET", path, query=query, accept="*/*", timeout=timeout)
    except TRANSPORT_ERRORS as error:
        raise ApiUnavailable(error) from error
    if response.status >= 400:
        raw: bytes = await response.read()
        response.release()
        try:
            message = str(json.loads(raw).get("message") or "")
        except ValueError:
            message = raw[:500].decode(errors="replace")
        raise (Gone() if response.status == 410 else ApiError(response.status, message))
    return response


async def lines(response: Any) -> AsyncGenerator[bytes, None]:
    """The response body split at newlines, without a limit on a line's length (a watch event may be larger than
    a line reader's)."""
    pending = b""
    try:
        async for chunk in response.content.iter_any():
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line
        if pending:
            yield pending
    finally:
        response.release()


class _Broken(Exception):  # noqa: N818 - the connection of an open watch broke: open it again from its version
    pass


@dataclass
class _Position:
    version: str | None = None
    """Where the next watch starts; None: list first."""


async def _listed(api: KubeApi, path: str, query: dict[str, str], at: _Position) -> AsyncGenerator[JSON, None]:
    """Every object of one (paged) list; `at` is its resourceVersion once the last page came."""
    while True:
        try:
            listing = await api.request("GET", path, query=query)
        except ApiError as error:
            if error.status == 410:  # the continue token expired: a new snapshot
                raise Gone from error
            raise
        for item in listing.get("items", []):
            yield item
        token = listing["metadata"].get("continue")
        if not token:
            break
        query = {**query, "continue": token}
    at.version = str(listing["metadata"]["resourceVersion"])


async def _watched(
    api: KubeApi, path: str, query: dict[str, str], at: _Position,
) -> AsyncGenerator[tuple[str, JSON], None]:
    """The changes of one watch from `at`, until the API server ends it; `at` follows every event and bookmark."""
    seconds = int(query["timeoutSeconds"])
    response = await open_stream(api, path, {**query, "resourceVersion": str(at.version)},
                                 aiohttp.ClientTimeout(total=seconds + 30, sock_connect=30))
    try:
        async with contextlib.aclosing(lines(response)) as received:  # released when the caller stops
            async for line in received:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone
                    raise ApiError(int(obj.get("code") or 500), str(obj.get("message") or "watch failed"))
                at.version = (obj.get("metadata") or {}).get("resourceVersion") or at.version
                if kind != "BOOKMARK":
                    yield str(kind), obj
    except TRANSPORT_ERRORS as error:
        raise _Broken(error) from error


async def reflect(
    api: KubeApi, path: str, *, label_selector: str | None = None, field_selector: str | None = None,
    page_size: int | None = PAGE_SIZE, watch_seconds: int = WATCH_SECONDS, backoff: Backoff | None = None,
    persistent: bool = True, what: str = "objects",
) -> AsyncGenerator[tuple[str, JSON], None]:
    """Every object of the collection at `path` (LISTED, then SYNCED once listed), then each change, until the
    caller stops iterating (see the module's docstring for when it lists again and how it waits)."""
    backoff = backoff or Backoff()
    selectors = {key: value for key, value in (("fieldSelector", field_selector),
                                                 ("labelSelector", label_selector)) if value}
    at = _Position()
    while True:
        try:
            if at.version is None:
                query = {**selectors, **({"limit": str(page_size)} if page_size else {})}
                async with contextlib.aclosing(_listed(api, path, query, at)) as items:
                    async for item in items:
                        yield LISTED, item
                yield SYNCED, {}
            while True:  # one watch after another, each from where the last ended
                query = {**selectors, "watch": "true", "allowWatchBookmarks": "true",
                         "timeoutSeconds": str(watch_seconds)}
                async with contextlib.aclosing(_watched(api, path, query, at)) as changes:
                    async for change in changes:
                        yield change
        except asyncio.CancelledError:
            raise
        except Gone:
            log.debug("%s watch of %s: resourceVersion %s is gone; listing again", what, path, at.version)
            at.version = None
        except _Broken as error:  # the version stays: the watch is opened again where it broke
            if persistent:
                log.warning("%s watch of %s broke (%s); watching again from resourceVersion %s", what, path,
                            error.__cause__, at.version)
        except Exception as error:  # a persistent stream outlives any failure
            if not persistent:
                raise
            if not isinstance(error, ApiUnavailable):  # refused or malformed: start over from a list
                at.version = None
            log.warning("%s watch of %s failed (%s: %s); %s", what, path, type(error).__name__, error,
                        "listing again" if at.version is None
                        else f"watching again from resourceVersion {at.version}")
            yield FAILED, {}
        await asyncio.sleep(backoff.next())
