"""The ingress's HTTP surface: `POST /hooks/{namespace}/{workflow}/{trigger}`, health and metrics.

Plumbing only: bounded concurrency, content checks, a capped and timed body
read, then `DeliveryHandler` decides. Every refusal is JSON saying why, and
creates nothing. Logs name the trigger and the outcome, never the body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

from towline.k8s.workflowcache import WorkflowCache
from towline.triggers.ingress.deliveries import Accepted, DeliveryHandler
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.payload import media_type
from towline.triggers.ingress.workflows import TriggerResolver

log = logging.getLogger(__name__)

DELIVERIES = Counter("towline_webhook_deliveries_total", "Webhook deliveries by outcome.", ["status", "reason"])
LATENCY = Histogram("towline_webhook_request_seconds", "Time to answer a webhook delivery.")
MAX_BODY_LIMIT = 10_485_760
"""The largest maxBodyBytes a trigger may set; the server never reads more."""


@dataclass(frozen=True)
class IngressSettings:
    max_in_flight: int = 64
    """Deliveries handled at once; more answer 503 with Retry-After instead of queueing."""
    body_timeout_seconds: float = 10.0
    """A body that takes longer to arrive answers 408."""
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
        self._slots = asyncio.Semaphore(self._settings.max_in_flight)
        self._clock = clock
        self._monotonic = monotonic

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_LIMIT + 1)
        app.router.add_post("/hooks/{namespace}/{workflow}/{trigger}", self.hook)
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
        if self._slots.locked():
            outcome: Accepted | Refusal = Refusal(503, "Busy", "too many deliveries in flight; retry shortly",
                                                  retry_after=1)
        else:
            async with self._slots:
                outcome = await self._hook(request)
        LATENCY.observe(time.perf_counter() - started)
        return self._answer(request, outcome)

    async def _hook(self, request: web.Request) -> Accepted | Refusal:
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
        if media not in webhook.content_types:
            return Refusal(415, "UnsupportedContentType", f"content type {media[:80] or '(none)'} is not accepted; "
                           f"this trigger accepts {', '.join(webhook.content_types)} (contentTypes)")
        raw = await self._read_body(request, webhook.max_body_bytes)
        if isinstance(raw, Refusal):
            return raw
        headers = {k.lower(): v for k, v in reversed(list(request.headers.items()))}
        return await self._deliveries.handle(target, headers, media, raw, now=self._clock(),
                                             monotonic=self._monotonic())

    async def _read_body(self, request: web.Request, limit: int) -> bytes | Refusal:
        too_large = Refusal(413, "BodyTooLarge", f"the body is larger than the trigger's maxBodyBytes ({limit})")
        if request.content_length is not None and request.content_length > limit:
            return too_large
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self._settings.body_timeout_seconds):
                while chunk := await request.content.read(65536):
                    size += len(chunk)
                    if size > limit:
                        return too_large
                    chunks.append(chunk)
        except TimeoutError:
            return Refusal(408, "BodyTimeout",
                           f"the body did not arrive within {self._settings.body_timeout_seconds:g} s")
        return b"".join(chunks)

    def _answer(self, request: web.Request, outcome: Accepted | Refusal) -> web.Response:
        path = request.match_info
        where = f"{path.get('namespace')}/{path.get('workflow')}/{path.get('trigger')}"
        headers = {}
        if isinstance(outcome, Refusal):
            payload: dict[str, object] = {"status": outcome.status, "reason": outcome.reason,
                                          "message": outcome.message}
            if outcome.retry_after is not None:
                headers["Retry-After"] = str(max(1, math.ceil(outcome.retry_after)))
            log.info("delivery to %s refused: %d %s: %s", where, outcome.status, outcome.reason, outcome.message)
            DELIVERIES.labels(str(outcome.status), outcome.reason).inc()
        else:
            payload = {"status": outcome.status, "run": outcome.run, "message": outcome.message}
            log.info("delivery to %s: %d %s%s", where, outcome.status, outcome.message,
                     f" ({outcome.run})" if outcome.run else "")
            DELIVERIES.labels(str(outcome.status), "Filtered" if outcome.run is None else "Accepted").inc()
        return web.Response(status=outcome.status, text=json.dumps(payload), content_type="application/json",
                            headers=headers)
