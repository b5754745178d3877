"""The ingress's HTTP surfaces: the public `POST /hooks/{namespace}/{workflow}/{trigger}` (webhook deliveries
and CloudEvents), and an admin application (health, readiness, metrics) served on its own port, never the
public one.

Plumbing only: resolve the path, content checks, a share of the capacity
(capacity.py), the header checks and the trigger's keys, a capped, timed,
rate-floored body read that feeds the MAC (body.py), then `DeliveryHandler`
decides. Every refusal is JSON saying why, and creates nothing. Logs name the
trigger and the outcome, never the body.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

import towline.buildinfo  # noqa: F401 - registers towline_build_info on the ingress's /metrics
from towline.k8s.workflowcache import WorkflowCache
from towline.triggers.ingress import cloudevents
from towline.triggers.ingress.body import BodyLimits, busy, read_body
from towline.triggers.ingress.capacity import Capacity, CapacityLimits
from towline.triggers.ingress.deliveries import Accepted, DeliveryHandler
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.payload import media_type
from towline.triggers.ingress.workflows import TriggerResolver

log = logging.getLogger(__name__)

DELIVERIES = Counter("towline_webhook_deliveries_total", "Webhook deliveries by outcome.", ["status", "reason"])
LATENCY = Histogram("towline_webhook_request_seconds", "Time to answer a webhook delivery.")
BUFFERED = Gauge("towline_webhook_buffered_bytes", "Body bytes the ingress holds in memory now.")
MAX_BODY_LIMIT = 10_485_760
"""The largest maxBodyBytes a trigger may set; the server never reads more."""


@dataclass(frozen=True)
class IngressSettings(CapacityLimits):
    """The capacity's limits (delivery slots and buffered bytes, CapacityLimits) and how long a request may take."""

    body_timeout_seconds: float = 10.0
    """A body that takes longer to arrive answers 408."""
    min_body_bytes_per_second: float = 8192.0
    """After `body_grace_seconds`, a body slower than this on average is cut (408 BodyTooSlow)."""
    body_grace_seconds: float = 1.0
    header_timeout_seconds: float = 15.0
    """A connection that has not sent a complete request head this long after it opened (or after the
    previous response) is closed; also the idle keep-alive limit."""


class Ingress:
    """Wires the cache, the trigger resolver and the delivery handler to aiohttp."""

    def __init__(
        self, workflows: WorkflowCache, deliveries: DeliveryHandler, settings: IngressSettings | None = None,
        *, clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._workflows = workflows
        self._deliveries = deliveries
        self._resolver = TriggerResolver()
        self._settings = settings or IngressSettings()
        self._capacity = Capacity(self._settings)
        BUFFERED.set_function(lambda: self._capacity.buffered_bytes)
        self._clock = clock
        self._monotonic = monotonic

    def application(self) -> web.Application:
        """The public port: deliveries only."""
        app = web.Application(client_max_size=MAX_BODY_LIMIT + 1)
        app.router.add_post("/hooks/{namespace}/{workflow}/{trigger}", self.hook)
        return app

    def admin_application(self) -> web.Application:
        """The admin port (probes, Prometheus): not exposed by the public Service."""
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        return app

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        if not self._workflows.synced.is_set():
            return web.json_response({"status": "not ready", "message": "the Workflow cache has not synced"},
                                     status=503)
        return web.json_response({"status": "ready", "workflows": len(self._workflows)})

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def hook(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        outcome = await self._hook(request)
        LATENCY.observe(time.perf_counter() - started)
        return self._answer(request, outcome)

    async def _hook(self, request: web.Request) -> Accepted | Refusal:  # noqa: PLR0911 - one answer per check
        namespace, name, trigger = (request.match_info[k] for k in ("namespace", "workflow", "trigger"))
        if not self._workflows.synced.is_set():
            return Refusal(503, "NotReady", "the ingress has not loaded the Workflows yet", retry_after=1)
        target = self._resolver.resolve(self._workflows.get(namespace, name), namespace, name, trigger)
        if isinstance(target, Refusal):
            return target
        webhook = target.webhook
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            return Refusal(415, "UnsupportedEncoding",
                           f"Content-Encoding {encoding[:40]} is not accepted; send the body uncompressed")
        media = media_type(request.headers.get("Content-Type"))
        headers = {k.lower(): v for k, v in reversed(list(request.headers.items()))}
        if target.cloud_event is not None and not cloudevents.accepts(media, headers):
            return Refusal(415, "UnsupportedContentType", f"content type {media[:80] or '(none)'} does not carry a "
                           f"CloudEvent; send {cloudevents.STRUCTURED} (structured mode) or ce- headers with JSON "
                           "data (binary mode)")
        if target.cloud_event is None and media not in webhook.content_types:
            return Refusal(415, "UnsupportedContentType", f"content type {media[:80] or '(none)'} is not accepted; "
                           f"this trigger accepts {', '.join(webhook.content_types)} (contentTypes)")
        lease = self._capacity.lease(namespace)
        if lease is None:
            return busy("too many deliveries in flight for this namespace or this ingress; retry shortly")
        try:
            prepared = await self._deliveries.prepare(target, headers, now=self._clock())
            if isinstance(prepared, Refusal):
                return prepared
            limits = BodyLimits(webhook.max_body_bytes, self._settings.body_timeout_seconds,
                                self._settings.min_body_bytes_per_second, self._settings.body_grace_seconds)
            raw = await read_body(request.content, request.content_length, limits, lease, prepared.mac,
                                  monotonic=self._monotonic)
            if isinstance(raw, Refusal):
                if raw.reason == "BodyTooLarge":
                    await self._deliveries.too_large(target, headers, request.content_length)
                return raw
            return await self._deliveries.handle(prepared, media, raw, now=self._clock(), monotonic=self._monotonic())
        finally:
            lease.release()

    def _answer(self, request: web.Request, outcome: Accepted | Refusal) -> web.Response:
        path = request.match_info
        where = f"{path.get('namespace')}/{path.get('workflow')}/{path.get('trigger')}"
        headers = {}
        if isinstance(outcome, Refusal):
            payload: dict[str, object] = {"status": outcome.status, "reason": outcome.reason,
                                          "message": outcome.message}
            if outcome.retry_after is not None:
                headers["Retry-After"] = str(max(1, math.ceil(outcome.retry_after)))
            log.info("delivery to %s refused: %d %s: %s", where, outcome.status, outcome.reason,
                     outcome.detail or outcome.message)
            DELIVERIES.labels(str(outcome.status), outcome.reason).inc()
        else:
            payload = {"status": outcome.status, "run": outcome.run, "message": outcome.message}
            if outcome.challenge is not None:
                payload["challenge"] = outcome.challenge
            log.info("delivery to %s: %d %s%s", where, outcome.status, outcome.message,
                     f" ({outcome.run})" if outcome.run else "")
            kind = "Challenge" if outcome.challenge is not None else "Filtered" if outcome.run is None else "Accepted"
            DELIVERIES.labels(str(outcome.status), kind).inc()
        return web.Response(status=outcome.status, text=json.dumps(payload), content_type="application/json",
                            headers=headers)
