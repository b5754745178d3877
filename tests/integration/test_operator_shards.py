"""Several active operator replicas, each on its own shards of namespaces (towline.k8s.shards).

Against their own loopback control plane with kwok as the node (tests/bench/simcluster.py):
no real node, so no node lock; the full-size proof is `python -m tests.bench.bench_shards`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
from tests.bench.bench_shards import shard_proof
from tests.bench.simcluster import SimCluster, sim_cluster

from towline.k8s.client import KubeApi
from towline.k8s.leader import LeaderTimings
from towline.k8s.shards import ShardElectors
from towline_dev.install import OPERATOR_NAMESPACE

# local_only: it builds its own loopback control plane and kwok node (no real node, so no node lock).
pytestmark = [pytest.mark.integration, pytest.mark.local_only]

TIMINGS = LeaderTimings(lease_seconds=6, renew_deadline=4, retry_period=1)


@pytest.fixture(scope="module")
def kwok_cluster() -> Iterator[SimCluster]:
    with sim_cluster() as cluster:
        yield cluster


async def _until(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        await asyncio.sleep(0.1)


def test_shards_spread_over_replicas_move_when_one_dies_and_come_back_to_a_new_one(kwok_cluster: SimCluster) -> None:
    """Three electors in one process, on the real API server: each takes one of three shards; one stops
    renewing (as a killed replica) and another takes its shard; a new replica asks for one back. At no
    sampled moment may two of them act on one shard (`is_leader` is what every write is fenced by)."""

    async def scenario() -> list[str]:
        connections = [await KubeApi.connect(str(kwok_cluster.operator_kubeconfig)) for _ in range(4)]
        electors = [ShardElectors(api, namespace=OPERATOR_NAMESPACE, base_name="elector-test", identity=name,
                                  shards=3, replicas=3, timings=TIMINGS)
                    for api, name in zip(connections, "abcd", strict=True)]
        overlaps: list[str] = []
        alive = electors[:3]

        async def watch_for_overlaps() -> None:
            while True:
                for shard in range(3):
                    acting = [e.identity for e in alive if e.electors[shard].is_leader]
                    if len(acting) > 1:
                        overlaps.append(f"shard {shard}: {acting}")
                await asyncio.sleep(0.05)

        tasks = {e.identity: asyncio.create_task(e.run()) for e in alive}
        checker = asyncio.create_task(watch_for_overlaps())
        try:
            await _until("one shard each", lambda: sorted(len(e.held()) for e in alive) == [1, 1, 1])
            killed = alive[2]
            orphan = killed.held()[0]
            tasks.pop(killed.identity).cancel()  # no release: its Lease expires as a killed replica's would
            await _until("take-over of the dead replica's shard",
                         lambda: any(orphan in e.held() for e in alive[:2]))
            assert sorted(len(e.held()) for e in alive[:2]) == [1, 2]
            alive = [alive[0], alive[1], electors[3]]
            tasks["d"] = asyncio.create_task(electors[3].run())
            await _until("a shard asked back by the new replica",
                         lambda: sorted(len(e.held()) for e in alive) == [1, 1, 1])
        finally:
            for task in [*tasks.values(), checker]:
                task.cancel()
            await asyncio.gather(*tasks.values(), checker, return_exceptions=True)
            for elector in electors:
                await elector.release()
            for api in connections:
                await api.close()
        return overlaps

    assert asyncio.run(scenario()) == []


def test_three_replicas_decide_every_run_once_across_a_killed_and_a_paused_shard_holder(
    kwok_cluster: SimCluster,
) -> None:
    """30 runs in 9 namespaces on 3 replicas x 3 shards; a holder SIGKILLed at a quarter of the runs,
    another SIGSTOPped at half until its shard was taken over: every run succeeds, is decided (its
    final status written) by exactly one replica, for its namespace's shard, and no step gets a second Job;
    the replicas alive at the end count in towline_shard_runs_decided_total what they logged."""
    proof = asyncio.run(shard_proof(kwok_cluster, runs=30, namespaces=9, replicas=3))
    assert proof.problems() == []
    assert len(proof.deciders()) == 30
    assert [signal for signal, *_ in proof.takeovers] == ["SIGKILL", "SIGSTOP"]
    assert sum(len(names) for names in proof.jobs.values()) == 90
    # The replicas alive at the end export what their logs say they decided (problems() compares them).
    assert sum(sum(counted.values()) for counted in proof.metrics.values()) > 0
