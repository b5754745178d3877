"""Webhook ingress under an anonymous flood: a well-behaved sender's latency, and the ingress's peak memory.

One `towline ingress` process with the chart's defaults (64 in flight, 16 per
namespace, 64 MiB of bodies, 16 MiB per namespace, 8 KiB/s minimum body rate
after 1 s, 10 s body timeout) against the real local API server. An attacker
process on loopback, who holds no signing key, floods the trigger of one
namespace (which allows 10 MiB bodies) while a well-behaved sender in another
process posts signed deliveries to another namespace's trigger, one every
0.25 s, on a new connection each:

- baseline: no flood;
- slow-body flood: FLOOD_CONNECTIONS connections announce 1 MiB bodies and
  send one byte every 0.5 s, reconnecting as soon as they are cut;
- big-body flood: BIG_CONNECTIONS connections send 10 MiB bodies as fast as
  loopback allows, again and again.

Prints the good sender's statuses and latencies and the ingress's peak RSS
(sampled from /proc every 50 ms, and the kernel's VmHWM). Asserts nothing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import multiprocessing
import secrets
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from towline.triggers.ingress import sign
from towline_dev.binaries import find_binaries
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess, grant_signing_secrets, ingress_kubeconfig, install_ingress_rbac
from towline_dev.install import install_chart, install_crds

VICTIM, GOOD = "bench-flood-victim", "bench-flood-good"
PHASE_SECONDS = 15.0
GOOD_INTERVAL = 0.25
FLOOD_CONNECTIONS = 400
BIG_CONNECTIONS = 64
BIG_BODY = 10 * 1024 * 1024
BODY = json.dumps({"type": "deploy", "ref": "main"}).encode()


def _workflow(namespace: str, max_body: int) -> dict[str, object]:
    verify = {"scheme": "standard-webhooks", "secretRef": {"name": "hook-key", "key": "signing-secret"}}
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "deploy", "namespace": namespace},
        "spec": {"triggers": [{"name": "hook", "webhook": {"verify": verify, "maxBodyBytes": max_body,
                                                           "rateLimitPerMinute": 100000}}],
                 "steps": [{"id": "noop", "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}}]},
    }


def _head(port: int, length: int) -> bytes:
    """A delivery head as an attacker without the key writes it: fresh timestamp, well-formed, wrong signature."""
    forged = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    headers = sign.standard_webhooks_headers(forged, f"msg_{secrets.token_hex(8)}", int(time.time()), b"x")
    lines = [f"POST /hooks/{VICTIM}/deploy/hook HTTP/1.1", f"Host: 127.0.0.1:{port}",
             "Content-Type: application/json", f"Content-Length: {length}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _slow_body(port: int, stop_at: float, answers: Counter[str]) -> None:
    while time.monotonic() < stop_at:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_head(port, 1024 * 1024))
            await writer.drain()
            while time.monotonic() < stop_at:
                try:
                    line = await asyncio.wait_for(reader.readline(), 0.5)
                except TimeoutError:
                    writer.write(b" ")
                    await writer.drain()
                    continue
                answers[line.decode(errors="replace").split(" ")[1] if line else "closed"] += 1
                break
            writer.close()
        except OSError:
            answers["connection error"] += 1
            await asyncio.sleep(0.05)


async def _big_body(port: int, stop_at: float, answers: Counter[str]) -> None:
    chunk = b"x" * 65536
    while time.monotonic() < stop_at:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_head(port, BIG_BODY))
            for _ in range(BIG_BODY // len(chunk)):
                writer.write(chunk)
                await writer.drain()
            line = await reader.readline()
            answers[line.decode(errors="replace").split(" ")[1] if line else "closed"] += 1
            writer.close()
        except OSError:
            answers["cut while sending"] += 1
            await asyncio.sleep(0.05)


def _flood(kind: str, port: int, seconds: float, results: multiprocessing.Queue[dict[str, int]]) -> None:
    async def run() -> Counter[str]:
        answers: Counter[str] = Counter()
        stop_at = time.monotonic() + seconds
        worker, count = (_slow_body, FLOOD_CONNECTIONS) if kind == "slow" else (_big_body, BIG_CONNECTIONS)
        await asyncio.gather(*(worker(port, stop_at, answers) for _ in range(count)))
        return answers
    results.put(dict(asyncio.run(run())))


def _good_sender(url: str, secret: str, seconds: float) -> tuple[Counter[int], list[float]]:
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        headers = {"Content-Type": "application/json",
                   **sign.standard_webhooks_headers(secret, f"msg_{secrets.token_hex(8)}", int(time.time()), BODY)}
        started = time.perf_counter()
        try:
            statuses[httpx.post(url, content=BODY, headers=headers, timeout=30).status_code] += 1
        except httpx.HTTPError:
            statuses[0] += 1
        latencies.append(time.perf_counter() - started)
        time.sleep(GOOD_INTERVAL)
    return statuses, latencies


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _phase(kind: str | None, ingress: IngressProcess, url: str, secret: str) -> None:
    assert ingress.process is not None
    pid = ingress.process.pid
    peak = [_rss_kib(pid)]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.05):
            peak[0] = max(peak[0], _rss_kib(pid))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    results: multiprocessing.Queue[dict[str, int]] = multiprocessing.Queue()
    flood = None
    if kind is not None:
        flood = multiprocessing.Process(target=_flood, args=(kind, ingress.port, PHASE_SECONDS + 2, results))
        flood.start()
        time.sleep(2)  # the flood is at full strength before the good sender starts
    statuses, latencies = _good_sender(url, secret, PHASE_SECONDS)
    answers = results.get(timeout=120) if flood is not None else {}
    if flood is not None:
        flood.join(timeout=30)
    sampling.set()
    sampler.join()
    ordered = sorted(latencies)
    label = {None: "no flood", "slow": f"slow-body flood ({FLOOD_CONNECTIONS} conns)",
             "big": f"big-body flood ({BIG_CONNECTIONS} conns x 10 MiB)"}[kind]
    print(f"{label:<36} good sender: {dict(statuses)} of {len(latencies)}; latency p50 "
          f"{ordered[len(ordered) // 2] * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms; ingress peak RSS "
          f"{peak[0] / 1024:.0f} MiB (VmHWM so far {_rss_kib(pid, 'VmHWM') / 1024:.0f} MiB); "
          f"attacker's answers {dict(sorted(answers.items()))}", flush=True)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="towline-bench-flood-"))
    plane = ControlPlane(find_binaries()).start()
    ingress = IngressProcess(kubeconfig=Path(), log_path=work / "ingress.log")
    try:
        install_crds(plane)
        install_chart(plane)
        install_ingress_rbac(plane)
        keys = {}
        for namespace, max_body in ((VICTIM, BIG_BODY), (GOOD, 1024 * 1024)):
            plane.kubectl("create", "namespace", namespace)
            keys[namespace] = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
            plane.kubectl("create", "secret", "generic", "hook-key", "-n", namespace,
                          f"--from-literal=signing-secret={keys[namespace]}")
            grant_signing_secrets(plane, namespace, ["hook-key"])
            plane.kubectl("apply", "-f", "-", stdin=json.dumps(_workflow(namespace, max_body)))
        ingress.kubeconfig = ingress_kubeconfig(plane, work / "ingress.kubeconfig")
        ingress.start()
        url = f"{ingress.url}/hooks/{GOOD}/deploy/hook"
        while httpx.post(url, content=b"{}", timeout=10).json().get("reason") in {"NotFound", "NotReady"}:
            time.sleep(0.1)  # the ingress's watch has the Workflows (an unsigned probe gets 401, not 404)
        print(f"\nwebhook ingress under an anonymous flood on loopback (chart defaults; {PHASE_SECONDS:g} s per phase; "
              f"a signed delivery to another namespace every {GOOD_INTERVAL:g} s)")
        for kind in (None, "slow", "big"):
            _phase(kind, ingress, url, keys[GOOD])
    finally:
        ingress.stop()
        plane.stop()


if __name__ == "__main__":
    main()
