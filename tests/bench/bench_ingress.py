"""Webhook ingress throughput: signed requests per second and p99 latency, next to a bare aiohttp endpoint.

Three targets (and CloudEvents beside them), each its own process on loopback, driven by the same client with
the same concurrency for the same time, every request signed (Standard Webhooks,
a fresh delivery id each):
- bare: an aiohttp endpoint that answers 202 and does nothing else;
- ingress, filtered: the ingress verifies, rate-limits, parses and filters the
  delivery out (no API write): the ingress's own cost;
- ingress, run created: the full path, one WorkflowRun created per request on the
  real local API server;
- CloudEvents made by the reference SDK (structured and binary mode), signed with
  Standard Webhooks (binary mode: the ce- headers too), filtered out by type in
  the trigger's CEL filter, or creating one run each.
Prints figures and the ratios; asserts nothing about time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx
from cloudevents.v1.conversion import to_binary, to_structured
from cloudevents.v1.http import CloudEvent

from towline.triggers.ingress import sign
from towline_dev.binaries import find_binaries
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess, grant_signing_secrets, ingress_kubeconfig, install_ingress_rbac
from towline_dev.install import install_chart, install_crds
from towline_dev.processes import free_loopback_port, spawn, stop_process, wait_for

NAMESPACE = "bench-ingress"
CONCURRENCY = 16
SECONDS = 8.0
WARMUP_SECONDS = 1.0
ROUNDS = 2
BODY = json.dumps({"type": "order.paid", "data": {"id": "A-1001", "total": 12.5}}).encode()
PAID = "com.example.order.paid"
REFUNDED = "com.example.order.refunded"

BARE_SERVER = """
import sys
from aiohttp import web
async def hook(request):
    await request.read()
    return web.json_response({"status": 202}, status=202)
app = web.Application()
app.router.add_post("/hooks/{namespace}/{workflow}/{trigger}", hook)
app.router.add_get("/readyz", lambda request: web.json_response({}))
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def _workflow(secret_name: str) -> dict[str, object]:
    verify = {"scheme": "standard-webhooks", "secretRef": {"name": secret_name, "key": "signing-secret"}}
    common = {"verify": verify, "rateLimitPerMinute": 100000, "data": {"order_id": "body.data.id"}}
    events = {"verify": verify, "rateLimitPerMinute": 100000, "data": {"order_id": "event.data.order.id"}}
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "orders", "namespace": NAMESPACE},
        "spec": {
            "triggers": [{"name": "paid", "webhook": common},
                         {"name": "filtered", "webhook": {**common, "filter": "body.type == 'order.refunded'"}},
                         {"name": "event", "cloudEvent": {**events, "types": [PAID, REFUNDED],
                                                          "filter": f"event.type == '{PAID}'"}}],
            "steps": [{"id": "noop", "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}}],
        },
    }


Request = tuple[dict[str, str], bytes]


def _webhook(secret: str, stamp: int) -> Request:
    return {"Content-Type": "application/json",
            **sign.standard_webhooks_headers(secret, f"msg_{secrets.token_hex(8)}", stamp, BODY)}, BODY


def _cloud_event(mode: Callable[[CloudEvent], Request], event_type: str) -> Callable[[str, int], Request]:
    """A CloudEvent made by the reference SDK in `mode`, a fresh id each, signed as its sender would."""
    def make(secret: str, stamp: int) -> Request:
        # datacontenttype makes to_binary send Content-Type: application/json (aiohttp would say octet-stream).
        event = CloudEvent({"type": event_type, "source": "/shop/orders", "id": secrets.token_hex(8),
                            "datacontenttype": "application/json"}, {"order": {"id": "A-1001", "total": 12.5}})
        headers, body = mode(event)
        signed = sign.cloud_event_standard_headers(secret, f"msg_{secrets.token_hex(8)}", stamp, headers, body)
        return {**headers, **signed}, body
    return make


async def _drive(url: str, secret: str, make: Callable[[str, int], Request] = _webhook,
                 ) -> tuple[float, list[float], dict[int, int]]:
    """Requests/s, latencies (s) and status counts over SECONDS after a warm-up, CONCURRENCY at once.

    Requests are signed before the clock starts (each with its own delivery id), and sent with
    aiohttp's client, so the client's own cost is as small as it can be in Python.
    """
    count = int((WARMUP_SECONDS + SECONDS) * 8000)
    stamp = int(time.time())
    signed = [make(secret, stamp) for _ in range(count)]
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    measuring = False
    stop_at = time.monotonic() + WARMUP_SECONDS + SECONDS
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while time.monotonic() < stop_at and signed:
                headers, body = signed.pop()
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                elapsed = time.perf_counter() - started
                if measuring:
                    latencies.append(elapsed)
                    statuses[response.status] = statuses.get(response.status, 0) + 1

        tasks = [asyncio.create_task(worker()) for _ in range(CONCURRENCY)]
        await asyncio.sleep(WARMUP_SECONDS)
        measuring = True
        began = time.monotonic()
        await asyncio.gather(*tasks)
        duration = time.monotonic() - began
    return len(latencies) / duration, latencies, statuses


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="towline-bench-ingress-"))
    plane = ControlPlane(find_binaries()).start()
    bare_port = free_loopback_port()
    bare = spawn([sys.executable, "-c", BARE_SERVER, str(bare_port)], log_path=work / "bare.log")
    ingress = IngressProcess(kubeconfig=Path(), log_path=work / "ingress.log", max_in_flight=256)
    try:
        install_crds(plane)
        install_chart(plane)
        install_ingress_rbac(plane)
        plane.kubectl("create", "namespace", NAMESPACE)
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        plane.kubectl("create", "secret", "generic", "shop-webhook", "-n", NAMESPACE,
                      f"--from-literal=signing-secret={secret}")
        grant_signing_secrets(plane, NAMESPACE, ["shop-webhook"])
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(_workflow("shop-webhook")))
        ingress.kubeconfig = ingress_kubeconfig(plane, work / "ingress.kubeconfig")
        ingress.start()
        wait_for(lambda: _up(bare_port), timeout=30, what="the bare endpoint")
        time.sleep(1)  # the ingress's watch has the Workflow

        event_url = f"{ingress.url}/hooks/{NAMESPACE}/orders/event"
        targets: list[tuple[str, str, Callable[[str, int], Request]]] = [
            ("bare aiohttp (does nothing)", f"http://127.0.0.1:{bare_port}/hooks/{NAMESPACE}/orders/paid", _webhook),
            ("ingress, signed, filtered (no API write)", f"{ingress.url}/hooks/{NAMESPACE}/orders/filtered",
             _webhook),
            ("ingress, signed, run created", f"{ingress.url}/hooks/{NAMESPACE}/orders/paid", _webhook),
            ("CloudEvent structured, filtered", event_url, _cloud_event(to_structured, REFUNDED)),
            ("CloudEvent binary, filtered", event_url, _cloud_event(to_binary, REFUNDED)),
            ("CloudEvent structured, run created", event_url, _cloud_event(to_structured, PAID)),
            ("CloudEvent binary, run created", event_url, _cloud_event(to_binary, PAID)),
        ]
        print(f"\nwebhook ingress: {CONCURRENCY} concurrent pre-signed requests for {SECONDS:g} s per target, one "
              f"aiohttp client process, loopback; {ROUNDS} rounds, targets interleaved (the machine is shared)")
        print(f"{'round':<6} {'target':<44} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}  statuses")
        for round_number in range(1, ROUNDS + 1):
            results = []
            for label, url, make in targets:
                rate, latencies, statuses = asyncio.run(_drive(url, secret, make))
                results.append((label, rate, _p(latencies, 0.99)))
                print(f"{round_number:<6} {label:<44} {rate:8.0f} {_p(latencies, 0.5) * 1000:8.1f} "
                      f"{_p(latencies, 0.99) * 1000:8.1f}  {statuses}", flush=True)
            bare_rate, bare_p99 = results[0][1], results[0][2]
            for label, rate, p99 in results[1:]:
                print(f"{round_number:<6} ratio {label} / bare: throughput {rate / bare_rate:.2f}x, "
                      f"p99 {p99 / bare_p99:.2f}x")
    finally:
        ingress.stop()
        stop_process(bare, grace_seconds=5)
        plane.stop()


def _up(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
    except httpx.HTTPError:
        return False
    return True


if __name__ == "__main__":
    main()
