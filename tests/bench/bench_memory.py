"""Operator memory with 1,000 Workflows and 5,000 finished runs present, on the real API server with kwok.

`python -m tests.bench.bench_memory`. The objects are made fast by the admin
client: Workflows of five steps, runs with the finished status of a real run
(one run of the chain is first carried out by the operator, and its status,
workflow snapshot and outputs included, is copied to every run through the
status subresource). Then a fresh operator starts, lists and caches them all,
and its resident memory is read from /proc (VmRSS now, VmHWM the peak) once it
has passed over every Workflow and its queues are empty, and 10 s later; then
20 runs are carried out and the peak read again.
Prints figures; asserts nothing about time or size.
"""

from __future__ import annotations

import asyncio
import copy
import os
import time
from typing import Any

from tests.bench.figures import counts_by, table
from tests.bench.scaleload import Observations, chain, create_runs, run_manifest, watching, workflow
from tests.bench.simcluster import RUNNER, SimCluster, operator_metrics, operator_rss_kib, sim_cluster
from towline.k8s.client import WORKFLOW_RUNS, WORKFLOWS, KubeApi
from towline_dev.install import OperatorProcess

NAMESPACE = "memory"
WORKFLOWS_PRESENT = int(os.environ.get("BENCH_WORKFLOWS", "1000"))
FINISHED_RUNS = int(os.environ.get("BENCH_FINISHED_RUNS", "5000"))
ACTIVE_RUNS = 20
SHAPE = chain(5)


async def _gather_limited(jobs: list[Any], parallel: int = 32) -> None:
    gate = asyncio.Semaphore(parallel)

    async def one(job: Any) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(job) for job in jobs))


async def _finished_status(cluster: SimCluster, admin: KubeApi, carol: KubeApi) -> dict[str, Any]:
    """The status of one real run of the chain, as the operator wrote it."""
    operator = cluster.start_operator(namespaces=(NAMESPACE,))
    seen = Observations(expected_runs=1)
    try:
        async with watching(admin, NAMESPACE, seen):
            await asyncio.sleep(3)
            await create_runs(carol, [run_manifest(SHAPE, NAMESPACE, "template", RUNNER)], seen)
            await asyncio.wait_for(seen.done.wait(), 300)
        body = await admin.get(WORKFLOW_RUNS.path(NAMESPACE, "template"))
    finally:
        operator.stop()
    assert body is not None
    status: dict[str, Any] = body["status"]
    return status


async def _populate(admin: KubeApi, status: dict[str, Any]) -> float:
    started = time.monotonic()
    names = [SHAPE.name] + [f"wf-{i:04d}" for i in range(1, WORKFLOWS_PRESENT)]
    manifests = []
    for name in names[1:]:
        manifest = workflow(SHAPE, NAMESPACE)
        manifest["metadata"]["name"] = name
        manifests.append(manifest)
    await _gather_limited([admin.create(WORKFLOWS.path(NAMESPACE), m) for m in manifests])

    async def finished_run(index: int) -> None:
        manifest = run_manifest(SHAPE, NAMESPACE, f"done-{index:05d}", "admin")
        manifest["spec"]["workflowRef"]["name"] = names[index % len(names)]
        body, _ = await admin.create(WORKFLOW_RUNS.path(NAMESPACE), manifest)
        body["status"] = copy.deepcopy(status)
        await admin.replace(WORKFLOW_RUNS.path(NAMESPACE, body["metadata"]["name"], "status"), body)

    await _gather_limited([finished_run(i) for i in range(FINISHED_RUNS)])
    return time.monotonic() - started


async def _settled(operator: OperatorProcess, samples: list[tuple[float, int, int]]) -> float:
    """Wait until the operator has queued every run once and its queues are empty; sample memory meanwhile."""
    started = time.monotonic()
    while True:
        samples.append((time.monotonic() - started, *operator_rss_kib(operator)))
        try:
            text = operator_metrics(operator)
        except OSError as error:  # one failed scrape is no reason to stop measuring
            print(f"metrics scrape failed: {error}")
            await asyncio.sleep(0.5)
            continue
        adds = counts_by(text, "towline_workqueue_adds_total", "name")
        depth = counts_by(text, "towline_workqueue_depth", "name")
        # Finished runs queue nothing; the Workflows' passes (which read the run summaries) come after the lists.
        if adds[("workflows",)] >= WORKFLOWS_PRESENT and not any(depth.values()):
            return time.monotonic() - started
        if time.monotonic() - started > 900:
            raise SystemExit(f"the operator did not settle in 900 s (adds {dict(adds)}, depth {dict(depth)})")
        await asyncio.sleep(0.5)


async def measure(cluster: SimCluster) -> None:
    cluster.namespace(NAMESPACE)
    cluster.apply(workflow(SHAPE, NAMESPACE))
    admin = await KubeApi.connect(str(cluster.plane.kubeconfig))
    carol = await KubeApi.connect(str(cluster.plane.kubeconfig), context=RUNNER)
    try:
        status = await _finished_status(cluster, admin, carol)
        populate_seconds = await _populate(admin, status)
        operator = cluster.start_operator(namespaces=(NAMESPACE,))
        samples: list[tuple[float, int, int]] = []
        await asyncio.sleep(1)
        settle_seconds = await _settled(operator, samples)
        for _ in range(20):
            await asyncio.sleep(0.5)
            samples.append((samples[-1][0] + 0.5, *operator_rss_kib(operator)))
        idle_rss, idle_peak = operator_rss_kib(operator)
        seen = Observations(expected_runs=ACTIVE_RUNS)
        async with watching(admin, NAMESPACE, seen):
            await create_runs(carol, [run_manifest(SHAPE, NAMESPACE, f"live-{i}", RUNNER) for i in range(ACTIVE_RUNS)],
                              seen)
            await asyncio.wait_for(seen.done.wait(), 600)
        busy_rss, busy_peak = operator_rss_kib(operator)
    finally:
        await admin.close()
        await carol.close()
    print(f"memory bench: {WORKFLOWS_PRESENT} Workflows and {FINISHED_RUNS} finished runs created in "
          f"{populate_seconds:.0f} s; run status {len(str(status))} characters each")
    print(table(["operator process", "resident (VmRSS)", "peak (VmHWM)"], [
        [f"after listing and queueing them all ({settle_seconds:.0f} s after start)",
         f"{idle_rss / 1024:.0f} MiB", f"{idle_peak / 1024:.0f} MiB"],
        [f"after {ACTIVE_RUNS} more runs of {SHAPE.name} on top", f"{busy_rss / 1024:.0f} MiB",
         f"**{busy_peak / 1024:.0f} MiB**"],
    ]))
    trace = [round(sample[1] / 1024) for sample in samples[:: max(1, len(samples) // 12)]]
    print(f"resident memory while settling (MiB): {trace}")


def main() -> None:
    with sim_cluster() as cluster:
        asyncio.run(measure(cluster))


if __name__ == "__main__":
    main()
