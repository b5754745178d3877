"""Towline's CloudEvents out: the chart's events.sink, where the operator announces runs, steps and approvals.

The events are towline.engine.events' records, made after a status write. `emit` only appends them to a bounded
queue (a full queue drops, counted in towline_events_dropped_total): it never waits, so a slow or absent receiver
never holds up a reconcile. One task of its own sends them in order, each a structured-mode CloudEvent signed the
Standard Webhooks way with the Secret the chart mounts (webhook-id is the event's id), over the connectors' SSRF
guard (towline_connectors.delivery): the sink's host is resolved once per delivery, and loopback, private, link-local
and metadata addresses are refused unless the chart opts into a private range; the API server's own addresses are
refused whatever the opt-in. A delivery that fails is tried again with backoff (doubling from a second, at most a
minute; a receiver's Retry-After up to five minutes) up to maxAttempts; one that still fails, or cannot succeed (a
refused address, a 4xx, a redirect), becomes a dead letter (towline.k8s.deadletters), and until a delivery succeeds
again the events behind it get one try each, so an outage neither stalls the queue nor fills it.

The signing secret is read from its file at each delivery (a rotated Secret is used as soon as the kubelet updates
the file) and never logged; the operator still reads no Secret through the API.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import json
import logging
import re
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import Counter, Gauge

from towline.api.events import EVENT_KINDS, TYPE_PREFIX, DeadLetter, DeadLetterStore, EventRecord
from towline_connectors.delivery import SignedDelivery, post_signed
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.netguard import (
    DestinationRefusedError,
    IPAddress,
    IPNetwork,
    NetGuard,
    NetworkRules,
    ResolutionError,
    opt_in_problem,
    system_resolver,
)
from towline_connectors.transport import Connector
from towline_connectors.wire import rfc3339

log = logging.getLogger(__name__)

DEFAULT_QUEUE_SIZE = 1000
DEFAULT_MAX_ATTEMPTS = 6
FIRST_RETRY_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
MAX_RETRY_AFTER_SECONDS = 300.0
STRUCTURED = "application/cloudevents+json; charset=utf-8"
"""The CloudEvents HTTP binding's structured mode: the whole event is the body, so one signature covers all of it."""
_LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
_TYPE_PATTERN = re.compile(r"^dev\.towline\.(?:\*|(?:run|step|approval)\.(?:\*|[a-z]+))$")

SENT = Counter("towline_events_sent_total", "CloudEvents the events sink accepted (2xx), by kind.", ["kind"])
FAILED = Counter("towline_events_failed_total",
                 "CloudEvents whose delivery failed for good (kept as dead letters), by kind.", ["kind"])
RETRIED = Counter("towline_events_retries_total", "Delivery attempts that failed and were tried again.")
DROPPED = Counter("towline_events_dropped_total",
                  "CloudEvents dropped unsent: the queue was full, the process stopped, or the dead-letter store "
                  "could not keep them.", ["reason"])
DEAD_LETTERS = Gauge("towline_events_dead_letters", "Dead letters kept (as this replica last wrote or read them).")


def _kind(event_type: str) -> str:
    kind = event_type.removeprefix(TYPE_PREFIX).split(".", 1)[0]
    return kind if kind in EVENT_KINDS else "other"


@dataclass(frozen=True)
class EventsConfig:
    """TOWLINE_EVENTS_* (the chart's events.sink values)."""

    url: str | None = None
    """The receiver; None: no events."""
    secret_file: Path | None = None
    types: tuple[str, ...] = ()
    """Type patterns (dev.towline.run.*, dev.towline.approval.decided); empty: every type."""
    allow_private: tuple[IPNetwork, ...] = ()
    queue_size: int = DEFAULT_QUEUE_SIZE
    max_attempts: int = DEFAULT_MAX_ATTEMPTS

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> EventsConfig:
        url = env.get("TOWLINE_EVENTS_SINK_URL", "").strip()
        if not url:
            return cls()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or " " in url:
            raise ValueError(f"TOWLINE_EVENTS_SINK_URL={url!r} must be an http(s) URL without credentials, like "
                             "https://events.example.com/towline; set events.sink.url in the chart values")
        try:
            NetGuard(NetworkRules()).check_host(parts.hostname)
        except DestinationRefusedError as refused:
            if "metadata" in refused.reason:  # no opt-in reaches these; private literals may be opted into below
                raise ValueError(f"events.sink.url: {refused}; name the receiver") from None
        secret = env.get("TOWLINE_EVENTS_SECRET_FILE", "").strip()
        if not secret:
            raise ValueError("TOWLINE_EVENTS_SECRET_FILE is empty: events are always signed; set "
                             "events.sink.secretRef (name and key of a Secret holding a whsec_ or whsk_ secret)")
        return cls(url=url, secret_file=Path(secret), types=event_types(env.get("TOWLINE_EVENTS_TYPES", "")),
                   allow_private=private_ranges(env.get("TOWLINE_EVENTS_ALLOW_PRIVATE_CIDRS", "")),
                   queue_size=_whole(env, "TOWLINE_EVENTS_QUEUE_SIZE", "events.sink.queueSize", DEFAULT_QUEUE_SIZE),
                   max_attempts=_whole(env, "TOWLINE_EVENTS_MAX_ATTEMPTS", "events.sink.maxAttempts",
                                       DEFAULT_MAX_ATTEMPTS, most=20))

    def wants(self, event_type: str) -> bool:
        return not self.types or any(fnmatch.fnmatchcase(event_type, pattern) for pattern in self.types)


def event_types(text: str) -> tuple[str, ...]:
    patterns = tuple(item.strip() for item in text.split(",") if item.strip())
    for pattern in patterns:
        if not _TYPE_PATTERN.match(pattern):
            raise ValueError(f"events.sink.types: {pattern!r} is not an event type Towline sends; name one like "
                             "dev.towline.run.succeeded, or a family like dev.towline.approval.* (docs/events.md)")
    return patterns


def private_ranges(text: str) -> tuple[IPNetwork, ...]:
    networks: list[IPNetwork] = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        try:
            network = ipaddress.ip_network(item, strict=False)
        except ValueError as error:
            raise ValueError(f"events.sink.allowPrivateCidrs: {error}") from None
        if (problem := opt_in_problem(network)) is not None:
            raise ValueError(f"events.sink.allowPrivateCidrs: {problem}")
        if any(network.version == own.version and network.overlaps(own) for own in _LOOPBACK):
            # A step's loopback is its own pod; the operator's holds its metrics and health ports (and a mesh
            # sidecar's admin port): never a receiver of events.
            raise ValueError(f"events.sink.allowPrivateCidrs: {network} overlaps loopback, the operator's own pod; "
                             "name the receiver's range instead")
        networks.append(network)
    return tuple(networks)


def _whole(env: Mapping[str, str], name: str, value: str, default: int, *, most: int = 1_000_000) -> int:
    text = env.get(name, str(default)).strip()
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise ValueError(f"{name}={text!r} must be a whole number from 1 to {most}; set {value} in the chart values, "
                         f"e.g. {default}")
    return int(text)


class SinkGuard(NetGuard):
    """The connectors' guard, which also refuses the API server's addresses (`refused`), whatever the opt-ins."""

    def __init__(self, rules: NetworkRules, refused: Callable[[], Sequence[str]],
                 resolver: Callable[[str, int], Sequence[str]] = system_resolver) -> None:
        super().__init__(rules, resolver)
        self._refused = refused

    def resolve(self, host: str, port: int) -> list[IPAddress]:
        addresses = super().resolve(host, port)
        try:
            networks = [ipaddress.ip_network(text, strict=False) for text in self._refused()]
        except RuntimeError as unknown:  # fail closed until the API server's addresses are known
            raise ResolutionError(host, f"the API server's addresses are not known yet ({unknown})",
                                  temporary=True) from None
        for address in addresses:
            if any(address.version == net.version and address in net for net in networks):
                raise DestinationRefusedError(f"{host} ({address})" if host != str(address) else host,
                                              "the Kubernetes API server's address; no opt-in opens it")
        return addresses


class EventSink:
    """The bounded queue and the task that delivers it."""

    def __init__(self, config: EventsConfig, store: DeadLetterStore, *, refused: Callable[[], Sequence[str]],
                 resolver: Callable[[str, int], Sequence[str]] = system_resolver, connector: Connector | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep, clock: Callable[[], float] = time.time) -> None:
        assert config.url is not None and config.secret_file is not None
        self.config = config
        self._url = config.url
        self._secret_file = config.secret_file
        self._store = store
        self._guard = SinkGuard(NetworkRules(allow_private=config.allow_private), refused, resolver)
        self._connector = connector
        self._sleep = sleep
        self._clock = clock
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=config.queue_size)
        self._failing = False
        self._ssl = ssl.create_default_context()

    def emit(self, records: Sequence[EventRecord]) -> None:
        """Queue the records the chart's types select; returns at once (a full queue drops, counted)."""
        for record in records:
            if not self.config.wants(record.type):
                continue
            try:
                self._queue.put_nowait(record.document())
            except asyncio.QueueFull:
                DROPPED.labels("queue_full").inc()
                log.warning("events queue full (%d): dropped %s %s", self.config.queue_size, record.type, record.id)

    async def run(self) -> None:
        """Deliver the queue, in order, until cancelled."""
        while True:
            event = await self._queue.get()
            await self.deliver(event)

    async def replays(self, every: float) -> None:
        """Every `every` seconds: the dead letters an admin asked to replay go to the back of the queue (and the
        towline_events_dead_letters gauge follows the store, whichever replica changed it)."""
        while True:
            await self._sleep(every)
            try:
                letters, kept = await self._store.take_replays()
            except Exception as error:  # the API server may be away; the request stays for the next look
                log.warning("could not read the dead letters to replay: %s", error)
                continue
            DEAD_LETTERS.set(kept)
            for letter in letters:
                log.info("replaying dead letter %s (%s)", letter.id, letter.event.get("type"))
                await self._queue.put(letter.event)

    async def deliver(self, event: dict[str, Any]) -> bool:
        """One event, tried up to maxAttempts times (once while the sink is failing); True when it was taken."""
        kind = _kind(str(event.get("type", "")))
        body = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
        attempts = 1 if self._failing else self.config.max_attempts
        error = ActionError(ErrorClass.TRANSIENT, "not tried")
        for attempt in range(1, attempts + 1):
            try:
                secrets = self._secret_file.read_text().strip()
            except OSError as unreadable:
                error = ActionError(ErrorClass.AUTH, f"the signing secret file {self._secret_file} cannot be read "
                                    f"({unreadable.strerror}); check events.sink.secretRef")
                break
            delivery = SignedDelivery(url=self._url, body=body, msg_id=str(event["id"]),
                                      timestamp=int(self._clock()), content_type=STRUCTURED)
            try:
                await post_signed(delivery, secrets, self._guard, self._ssl, now=self._clock(),
                                  connector=self._connector)
            except ActionError as failed:
                error = failed
                if not failed.retryable or attempt == attempts:
                    break
                RETRIED.inc()
                await self._sleep(self._delay(attempt, failed.retry_after_seconds))
                continue
            SENT.labels(kind).inc()
            self._failing = False
            return True
        FAILED.labels(kind).inc()
        self._failing = True
        log.warning("event %s (%s) not delivered after %d attempt(s): %s; kept as a dead letter", event.get("id"),
                    event.get("type"), attempt, error.message)
        letter = DeadLetter(event=event, attempts=attempt, error=f"{error.error_class}: {error.message}"[:1024],
                            failed_at=rfc3339(datetime.now(UTC), timespec="seconds"))
        try:
            DEAD_LETTERS.set(await self._store.keep(letter))
        except Exception as unkept:  # the API server may be away too: the event is lost, and counted
            DROPPED.labels("store_failed").inc()
            log.error("could not keep dead letter %s: %s", letter.id, unkept)
        return False

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        backoff: float = min(FIRST_RETRY_SECONDS * 2.0 ** (attempt - 1), MAX_BACKOFF_SECONDS)
        return backoff if retry_after is None else max(backoff, min(retry_after, MAX_RETRY_AFTER_SECONDS))

    def unsent(self) -> int:
        """Events still queued (dropped at a stop, counted)."""
        left = self._queue.qsize()
        if left:
            DROPPED.labels("stopped").inc(left)
        return left

