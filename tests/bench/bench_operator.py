"""Operator cost of one run: API requests per step by resource, and step-to-step latency.

`python -m tests.bench.bench_operator`. One run of an 8-step linear workflow of
data.transform steps on the real local control plane with kwok as the node
(tests/bench/simcluster.py), then:
- the API server's own `apiserver_request_total` delta over the run, by resource (all clients);
- the operator's own request counter (`towline_api_requests_total`), by verb and resource;
- the latency from one Job completing (seen on a watch) to the next Job being created.
bench_scale measures the same at scale. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import asyncio
import time

from tests.bench.figures import counts_by, delta, latency_row, resource_key, table
from tests.bench.scaleload import Observations, chain, create_runs, run_manifest, watching, workflow
from tests.bench.simcluster import RUNNER, SimCluster, operator_metrics, sim_cluster
from towline.k8s.client import KubeApi

STEPS = 8
NAMESPACE = "bench"


async def measure(cluster: SimCluster) -> None:
    shape = chain(STEPS)
    cluster.namespace(NAMESPACE)
    cluster.apply(workflow(shape, NAMESPACE))
    operator = cluster.start_operator(namespaces=(NAMESPACE,))
    admin = await KubeApi.connect(str(cluster.plane.kubeconfig))
    carol = await KubeApi.connect(str(cluster.plane.kubeconfig), context=RUNNER)
    seen = Observations(expected_runs=1)
    try:
        await asyncio.sleep(5)  # the operator takes the Lease and settles on the Workflow before measuring
        async with watching(admin, NAMESPACE, seen):
            before, operator_before = cluster.apiserver_metrics(), operator_metrics(operator)
            started = time.monotonic()
            await create_runs(carol, [run_manifest(shape, NAMESPACE, "chain-1", RUNNER)], seen)
            await asyncio.wait_for(seen.done.wait(), 300)
            elapsed = time.monotonic() - started
            await asyncio.sleep(2)  # the Workflow's pass after the run lands
            after, operator_after = cluster.apiserver_metrics(), operator_metrics(operator)
    finally:
        await admin.close()
        await carol.close()
    server = delta(counts_by(after, "apiserver_request_total", "resource", "subresource"),
                   counts_by(before, "apiserver_request_total", "resource", "subresource"))
    mine = delta(counts_by(operator_after, "towline_api_requests_total", "verb", "resource"),
                 counts_by(operator_before, "towline_api_requests_total", "verb", "resource"))
    total, own = sum(server.values()), sum(mine.values())
    print(f"operator bench: {STEPS}-step linear run {seen.run_phase.get('chain-1')} in {elapsed:.1f} s")
    print(f"API server requests during the run (all clients): {total} = {total / STEPS:.1f} per step")
    print(table(["resource (all clients)", "requests"],
                [[resource_key(*key), str(count)] for key, count in server.most_common(12)]))
    print(f"\noperator's own API requests: {own} = {own / STEPS:.2f} per step")
    print(table(["operator request", "count"], [[" ".join(key), str(count)] for key, count in mine.most_common()]))
    print()
    print(table(["latency", "n", "p50", "p95", "p99", "max"],
                [latency_row("step over -> next Job created", seen.next_job_latencies(shape)),
                 latency_row("run created -> first Job created", seen.first_job_latencies())]))


def main() -> None:
    with sim_cluster() as cluster:
        asyncio.run(measure(cluster))


if __name__ == "__main__":
    main()
