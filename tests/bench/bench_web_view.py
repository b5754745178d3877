"""What the web view costs with 1,000 runs in the namespace: time to first paint and to a drawn graph of a
run page, time to a full runs list, and the local server's memory.

A control plane without a node: 1,000 WorkflowRuns of a twelve-step workflow are created and given a
finished status (as the operator would write it), then `kubectl towline ui` serves them to headless
Chromium. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from towline.k8s.client import WORKFLOW_RUNS, KubeApi
from towline_dev.binaries import find_binaries
from towline_dev.browser import headless_chromium, web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.install import install_crds
from towline_dev.kubeconfig import context_name

RUNS = 1000
NAMESPACE = "default"
STEPS = [{"id": "fetch", "action": "data.transform", "with": {"data": {}}},
         *({"id": f"part_{i}", "needs": ["fetch"], "action": "data.transform", "with": {"data": {}}}
           for i in range(9)),
         {"id": "join", "needs": [f"part_{i}" for i in range(9)], "action": "data.transform", "with": {"data": {}}},
         {"id": "publish", "needs": ["join"], "action": "data.transform", "with": {"data": {}}}]


def _status(index: int) -> dict[str, Any]:
    started = f"2026-12-01T{index // 60 % 24:02d}:{index % 60:02d}:00Z"
    return {"phase": "Succeeded", "startedAt": started, "finishedAt": started,
            "workflowSpec": {"generation": 1, "steps": STEPS},
            "steps": [{"id": s["id"], "phase": "Succeeded", "attempt": 1, "jobName": f"run-{index}-{s['id']}-1",
                       "startedAt": started, "finishedAt": started, "output": {"rows": index}} for s in STEPS]}


async def _create_runs(kubeconfig: Path) -> None:
    api = await KubeApi.connect(str(kubeconfig))
    try:
        limit = asyncio.Semaphore(16)

        async def one(index: int) -> None:
            async with limit:
                name = f"run-{index:04d}"
                await api.create(WORKFLOW_RUNS.path(NAMESPACE), {
                    "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {"workflowRef": {"name": "big"}, "requestedBy": "admin"}})
                await api.merge_patch(WORKFLOW_RUNS.path(NAMESPACE, name, "status"), {"status": _status(index)})

        await asyncio.gather(*(one(i) for i in range(RUNS)))
    finally:
        await api.close()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _paint_ms(driver: Any) -> float:
    entries = driver.execute_script(
        "return performance.getEntriesByType('paint').filter(e => e.name === 'first-contentful-paint')"
        ".map(e => e.startTime)")
    return float(entries[0]) if entries else float("nan")


def main() -> None:
    plane = ControlPlane(find_binaries()).start()
    try:
        install_crds(plane)
        started = time.monotonic()
        asyncio.run(_create_runs(plane.kubeconfig))
        print(f"web view: created {RUNS} runs of {len(STEPS)} steps in {time.monotonic() - started:.1f} s")
        with web_view(plane.kubeconfig, context_name("admin"), NAMESPACE) as view, \
                headless_chromium(print) as driver:
            pid = view.pid
            view.sign_in(driver)
            print(f"web view: server memory at start {_rss_mib(pid):.0f} MiB")
            for attempt in ("cold", "warm"):
                began = time.monotonic()
                driver.get(view.url("/runs/run-0500"))
                WebDriverWait(driver, 60, poll_frequency=0.02).until(
                    lambda d: len(d.find_elements(By.CSS_SELECTOR, "#graph g.node[data-phase]")) == len(STEPS))
                drawn = time.monotonic() - began
                print(f"web view: run page ({attempt}): first contentful paint {_paint_ms(driver):.0f} ms, "
                      f"graph of {len(STEPS)} steps drawn {drawn * 1000:.0f} ms after navigation")
            began = time.monotonic()
            driver.get(view.url("/runs"))
            WebDriverWait(driver, 120, poll_frequency=0.05).until(
                lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) == RUNS)
            print(f"web view: runs list: first contentful paint {_paint_ms(driver):.0f} ms, all {RUNS} rows "
                  f"{(time.monotonic() - began) * 1000:.0f} ms after navigation")
            print(f"web view: server memory with both pages open {_rss_mib(pid):.0f} MiB")
    finally:
        plane.stop()


if __name__ == "__main__":
    main()
