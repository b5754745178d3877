"""`towline ingress`: the process. Connects, starts the Workflow cache, serves until SIGTERM.

aiohttp's server runs with decompression off (signatures cover the bytes as
sent) and its default header limits (8 KiB lines, 128 headers). Its keep-alive
timer starts when a connection opens (and again after each response) and is
not reset by incoming bytes: a connection whose request head is not complete
when it fires is closed. That is the header timeout (`header_timeout_seconds`).

A refusal sent before the body was read (503 Busy, 413, 401 from the headers)
leaves the rest of that body unread; aiohttp by default keeps such a
connection up to 10 s to read and discard it ("lingering"), which under a
reconnecting flood holds thousands of connections (measured: +300 MiB at
~1,800 refusals a second). The ingress lingers `LINGERING_SECONDS`: enough for
a sender that is still writing to read its answer, too short to pile up.

Two listeners: the public port serves only deliveries; the admin port serves
`/healthz`, `/readyz` and `/metrics` (the chart exposes it to the kubelet and
to whoever `networkPolicy.metricsFrom` names, never through the public Service);
its metrics include the dead letters' gauges (towline.triggers.ingress.lettergauges).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from aiohttp import web

from towline.k8s.client import KubeApi
from towline.k8s.identity import whoami
from towline.k8s.secrets import SecretKeyReader
from towline.k8s.workflowcache import WorkflowCache
from towline.tracing import TracingConfig, span_sink
from towline.triggers.ingress.app import Ingress, IngressSettings
from towline.triggers.ingress.deadletters import DeadLetters
from towline.triggers.ingress.deliveries import DeliveryHandler
from towline.triggers.ingress.lettergauges import dead_letter_watch
from towline.triggers.ingress.tracing import DeliveryTracer

log = logging.getLogger(__name__)

LINGERING_SECONDS = 1.0
INGRESS_SERVICE = "towline-ingress"
"""The service.name of the deliveries' spans (the operator's are towline-operator)."""


async def serve(kubeconfig: str | None, host: str, port: int, settings: IngressSettings, admin_port: int) -> None:
    api = await KubeApi.connect(kubeconfig)
    cache = WorkflowCache(api)
    letters = dead_letter_watch(api)
    try:
        identity = await whoami(api)
        spans = span_sink(TracingConfig.from_environment(os.environ), service=INGRESS_SERVICE)
        deliveries = DeliveryHandler(api, SecretKeyReader(api), requested_by=identity,
                                     tracer=DeliveryTracer(spans) if spans is not None else None,
                                     letters=DeadLetters(api))
        ingress = Ingress(cache, deliveries, settings)
        cache.start()
        letters.start()
        runner = web.AppRunner(ingress.application(), auto_decompress=False, access_log=None, handle_signals=False,
                               keepalive_timeout=settings.header_timeout_seconds, lingering_time=LINGERING_SECONDS)
        admin = web.AppRunner(ingress.admin_application(), access_log=None, handle_signals=False)
        await runner.setup()
        await admin.setup()
        await web.TCPSite(runner, host, port).start()
        await web.TCPSite(admin, host, admin_port).start()
        log.info("webhook ingress listening on %s:%d (health and metrics on %d) as %s", host, port, admin_port,
                 identity)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stopping.set)
        await stopping.wait()
        log.info("webhook ingress stopping")
        await runner.cleanup()
        await admin.cleanup()
        if spans is not None:  # the deliveries' spans still queued, sent within the exporter's timeout
            await asyncio.to_thread(spans.shutdown)
    finally:
        await letters.stop()
        await cache.stop()
        await api.close()


def run_ingress(kubeconfig: str | None, host: str, port: int, settings: IngressSettings, admin_port: int) -> int:
    asyncio.run(serve(kubeconfig, host, port, settings, admin_port))
    return 0
